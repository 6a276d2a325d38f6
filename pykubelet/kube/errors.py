"""apiserver errors by kind, from the Status object the apiserver answers with."""

from __future__ import annotations

from typing import Any


class KubeError(Exception):
    """A failed apiserver call: `status` is the HTTP status (0: no answer), `reason` the API reason."""

    def __init__(self, method: str, path: str, status: int, reason: str, message: str):
        self.method, self.path, self.status, self.reason, self.message = method, path, status, reason, message
        super().__init__(f"{method} {path}: {status} {reason}: {message}")


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """409: AlreadyExists, or a resourceVersion/UID precondition that did not hold."""


class Gone(KubeError):
    """410: the watch's resourceVersion is too old; list again."""


class Unreachable(KubeError):
    """No answer: apiserver down, restarting, or a network problem."""


_BY_STATUS = {404: NotFound, 409: Conflict, 410: Gone}


def from_status(method: str, path: str, http_status: int, body: Any) -> KubeError:
    reason, message = "", ""
    if isinstance(body, dict):
        reason, message = body.get("reason", ""), body.get("message", "")
    return _BY_STATUS.get(http_status, KubeError)(method, path, http_status, reason, message or str(body)[:500])
