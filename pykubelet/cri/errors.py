"""Typed CRI errors, mapped from gRPC status codes, so callers branch on kind, not text."""

from __future__ import annotations

import grpc


class CRIError(Exception):
    """A CRI call failed; `rpc` names the call, `code` is the gRPC status code."""

    def __init__(self, rpc: str, code: grpc.StatusCode | None, details: str):
        self.rpc, self.code, self.details = rpc, code, details
        code_name = code.name if code else "UNKNOWN"
        super().__init__(f"{rpc}: {code_name}: {details}")


class NotFound(CRIError):
    """The sandbox, container or image does not exist (deleting it again is success)."""


class Unavailable(CRIError):
    """The runtime is not answering on its socket: containerd down or restarting."""


class DeadlineExceeded(CRIError):
    """The call took longer than its timeout."""


class Unimplemented(CRIError):
    """The runtime does not implement this call (containerd 1.6: GetContainerEvents...)."""


_BY_CODE = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
}


def from_rpc_error(rpc: str, error: grpc.aio.AioRpcError) -> CRIError:
    code = error.code()
    return _BY_CODE.get(code, CRIError)(rpc, code, error.details() or "")
