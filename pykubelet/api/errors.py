"""Errors about API objects that name the object and the field, as kubectl users expect."""

from __future__ import annotations


class FieldError(ValueError):
    """One invalid field: `spec.containers[0].image: Required value`."""

    def __init__(self, path: str, detail: str):
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


class InvalidObject(ValueError):
    """An object that failed validation; `where` is the file or source it came from."""

    def __init__(self, where: str, kind: str, name: str, errors: list[FieldError]):
        self.where, self.kind, self.name, self.errors = where, kind, name, errors
        what = f'{kind} "{name}"' if name else kind
        reasons = "; ".join(str(e) for e in errors)
        super().__init__(f"{where}: {what} is invalid: {reasons}")
