"""Pod slices reach systemd on its private socket where no D-Bus daemon runs (a kind node)."""
from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from jeepney import new_error, new_method_return
from jeepney.low_level import HeaderFields, Parser

from pykubelet.runtime import systemd_units


class FakeSystemd:
    """systemd's private socket for one connection: EXTERNAL auth, then one call answered by
    `answer` (a function of the call message)."""

    def __init__(self, path: Path, answer):
        self.calls = []
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(1)
        self.server.settimeout(10)
        self.thread = threading.Thread(target=self._serve, args=(answer,), daemon=True)
        self.thread.start()

    def _serve(self, answer) -> None:
        conn, _ = self.server.accept()
        with conn:
            conn.settimeout(10)
            data = b""
            while b"BEGIN\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
                if b"AUTH EXTERNAL" in data and b"OK" not in data:
                    conn.sendall(b"OK 0123456789abcdef0123456789abcdef\r\n")
                    data += b"OK"  # answered
            parser = Parser()
            parser.add_data(data.split(b"BEGIN\r\n", 1)[1])
            call = parser.get_next_message()
            while call is None:
                parser.add_data(conn.recv(65536))
                call = parser.get_next_message()
            self.calls.append(call)
            conn.sendall(answer(call).serialise(serial=1))

    def close(self) -> None:
        self.thread.join(timeout=10)
        self.server.close()


@pytest.fixture
def no_system_bus(monkeypatch, tmp_path):
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", f"unix:path={tmp_path / 'no-bus'}")
    private = tmp_path / "private"
    monkeypatch.setattr(systemd_units, "SYSTEMD_PRIVATE", str(private))
    return private


def test_a_slice_starts_through_the_private_socket_without_a_system_bus(no_system_bus):
    fake = FakeSystemd(no_system_bus, lambda call: new_method_return(call, "o", ("/org/freedesktop/systemd1/job/7",)))
    try:
        systemd_units.start_slice("kubelet-kubepods-podabc.slice", [("Description", ("s", "pykubelet pod slice"))])
    finally:
        fake.close()
    [call] = fake.calls
    assert call.header.fields[HeaderFields.member] == "StartTransientUnit"
    assert call.body[0] == "kubelet-kubepods-podabc.slice"
    assert call.body[2] == [("Description", ("s", "pykubelet pod slice"))]


def test_systemd_refusing_on_the_private_socket_is_reported(no_system_bus):
    fake = FakeSystemd(no_system_bus, lambda call: new_error(call, "org.freedesktop.systemd1.NoSuchUnit", "s",
                                                               ("Unit x.slice not loaded.",)))
    try:
        systemd_units.stop_unit("x.slice")  # a unit systemd does not know is stopped already
    finally:
        fake.close()
    assert [c.body[0] for c in fake.calls] == ["x.slice"]


def test_neither_the_bus_nor_the_private_socket_is_a_clear_error(no_system_bus):
    with pytest.raises(systemd_units.SystemdError, match="system bus or at .*private"):
        systemd_units.start_slice("kubelet-kubepods-podabc.slice", [])
