"""Reads fields out of a decoded object (plain dicts and lists) and collects every field error
with its path, instead of stopping at the first: the base of the API validations.
"""

from __future__ import annotations

from typing import Any

from pykubelet.api.errors import FieldError


class FieldReader:
    """Collects every field error of one object instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def fail(self, path: str, detail: str) -> None:
        self.errors.append(FieldError(path, detail))

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"must be an object, got {type(value).__name__}")
            return {}
        return value

    def items(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"must be a list, got {type(value).__name__}")
            return []
        return value

    def string(self, obj: dict[str, Any], key: str, path: str, required: bool = False) -> str:
        value = obj.get(key)
        if value is None or value == "":
            if required:
                self.fail(f"{path}.{key}" if path else key, "Required value")
            return ""
        if not isinstance(value, str):
            self.fail(f"{path}.{key}" if path else key, f"must be a string, got {value!r}")
            return ""
        return value

    def strings(self, obj: dict[str, Any], key: str, path: str) -> tuple[str, ...]:
        values = self.items(obj.get(key), f"{path}.{key}")
        out = []
        for i, value in enumerate(values):
            if not isinstance(value, str):
                self.fail(f"{path}.{key}[{i}]", f"must be a string, got {value!r}")
            else:
                out.append(value)
        return tuple(out)

    def integer(self, obj: dict[str, Any], key: str, path: str, default: int, low: int, high: int) -> int:
        value = obj.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{path}.{key}", f"must be an integer, got {value!r}")
            return default
        if not low <= value <= high:
            self.fail(f"{path}.{key}", f"Invalid value: {value}: must be between {low} and {high}, inclusive")
            return default
        return value

    def boolean(self, obj: dict[str, Any], key: str, path: str) -> bool:
        value = obj.get(key, False)
        if not isinstance(value, bool):
            self.fail(f"{path}.{key}", f"must be true or false, got {value!r}")
            return False
        return value

    def choice(self, obj: dict[str, Any], key: str, path: str, allowed: tuple[str, ...], default: str) -> str:
        value = obj.get(key)
        if value is None or value == "":
            return default
        if value not in allowed:
            supported = ", ".join(f'"{a}"' for a in allowed)
            self.fail(f"{path}.{key}", f'Unsupported value: {value!r}: supported values: {supported}')
            return default
        return value

    def string_map(self, obj: dict[str, Any], key: str, path: str) -> dict[str, str]:
        values = self.mapping(obj.get(key), f"{path}.{key}")
        out = {}
        for k, v in values.items():
            if not isinstance(v, str):
                self.fail(f"{path}.{key}[{k}]", f"must be a string, got {v!r}")
            else:
                out[str(k)] = v
        return out

