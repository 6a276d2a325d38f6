"""One row of the settings table (options.py): a setting's field, flag, parser and destination."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pykubelet.config.values import is_zero

HARMLESS = object()
"""acts_as of a row that is never warned about: it only tunes something pykubelet has no use for
(rate limits of events, profiling handlers...), so ignoring it changes nothing a user would see."""


@dataclass(frozen=True)
class Option:
    target: str
    """Dotted attribute of Settings the value lands in, e.g. "pods.max_pods"."""
    parse: Callable[[Any], Any]
    """YAML value or flag string -> setting; ValueError says what was expected."""
    field: str = ""
    """KubeletConfiguration field; empty: flag only."""
    flag: str = ""
    """Command-line flag without the dashes; empty: config file only."""
    help: str = ""
    flag_type: Callable[[str], Any] | None = None
    """Converts the flag's text before `parse` (int for counts and ports); None: parse takes text."""
    file_relative: bool = False
    """A relative path in the config file is relative to the file, as the kubelet resolves it."""
    aliases: tuple[str, ...] = ()
    """Other spellings of the flag, e.g. -v for --v."""
    zero_is_default: bool = False
    """In the config file, the field's zero value ("0s", 0, "") means the default, as the kubelet's
    defaulting of KubeletConfiguration makes it (kubeadm writes such zeros). Flags are taken as given."""
    repeatable: bool = False
    """A list or map flag given several times accumulates (pflag's slices and maps); else the last wins."""
    acts_as: Any = None
    """Rows with no target: the value pykubelet behaves as if given; any other value is warned about."""
    note: str = ""
    """Rows with no target: what the warning adds (why, or what pykubelet does instead)."""

    @property
    def implemented(self) -> bool:
        return bool(self.target)

    @property
    def dest(self) -> str:
        """The argparse destination of the flag."""
        return self.flag.replace("-", "_")

    def asks_for_more(self, value: Any) -> bool:
        """A row with no target: does this value ask for behaviour pykubelet does not have?"""
        return self.acts_as is not HARMLESS and not is_zero(value) and value != self.acts_as
