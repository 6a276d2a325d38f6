"""GET over the agent's root-only unix socket (<root-dir>/pykubelet.sock, server/local.py), for
`pykubelet pods`, `explain`, `doctor` and the tests. OSError when nothing answers there (no
agent, or not root: the socket is mode 0600)."""

from __future__ import annotations

import http.client
import os
import socket

SOCKET_NAME = "pykubelet.sock"


def agent_socket(root_dir: str) -> str:
    """Where the agent serves /pods and /debug: in its root dir, next to the node's own files."""
    return os.path.join(root_dir, SOCKET_NAME)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def get(socket_path: str, path: str, timeout: float = 10) -> tuple[int, bytes]:
    """(status, body) of GET path on the unix socket."""
    connection = _UnixConnection(socket_path, timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    except http.client.HTTPException as e:
        raise OSError(f"{socket_path}: {e}") from None
    finally:
        connection.close()
