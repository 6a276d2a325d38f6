"""Reading a YAML file the user gave us, with errors that name the file."""

from __future__ import annotations

from typing import Any

import yaml


def read_yaml(path: str, what: str, error: type[Exception]) -> Any:
    """The parsed document; `error` (the caller's own error type) names the file and what it is."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except OSError as e:
        raise error(f"{path}: cannot read the {what}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML: {e}") from None
