"""sd_notify as systemd sees it: datagrams on the socket it names (a path or an abstract name),
READY/STOPPING with a status line, the watchdog's interval from WATCHDOG_USEC for this process
only, pings only while the agent is healthy, and nothing at all outside systemd."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from pykubelet.util.sd_notify import Notifier, WatchdogError


@pytest.fixture
def systemd_socket(tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.settimeout(2)
    yield path, sock
    sock.close()


def received(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def test_ready_and_stopping_reach_the_socket_with_a_status(systemd_socket):
    path, sock = systemd_socket
    notifier = Notifier({"NOTIFY_SOCKET": path})
    assert notifier.enabled and notifier.ready("serving; 3 pods")
    assert received(sock) == ["READY=1", "STATUS=serving; 3 pods"]
    assert notifier.stopping()
    assert received(sock) == ["STOPPING=1"]


def test_an_abstract_socket_name_starts_with_a_nul_byte():
    name = f"pykubelet-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    try:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).ready()
        assert received(sock) == ["READY=1"]
    finally:
        sock.close()


def test_outside_systemd_nothing_is_sent_and_nothing_fails():
    notifier = Notifier({})
    assert not notifier.enabled and not notifier.ready() and notifier.watchdog_seconds is None


def test_a_gone_socket_is_reported_not_raised(tmp_path):
    assert Notifier({"NOTIFY_SOCKET": str(tmp_path / "missing")}).ready() is False


def test_the_watchdog_interval_is_for_this_process_only():
    assert Notifier({"WATCHDOG_USEC": "20000000"}, pid=42).watchdog_seconds == 20.0
    assert Notifier({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "42"}, pid=42).watchdog_seconds == 20.0
    assert Notifier({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "7"}, pid=42).watchdog_seconds is None
    with pytest.raises(WatchdogError, match="too short"):
        Notifier({"WATCHDOG_USEC": "1000000"}, pid=42)
    with pytest.raises(WatchdogError, match="microseconds"):
        Notifier({"WATCHDOG_USEC": "soon"}, pid=42)


@pytest.mark.looptime
async def test_the_watchdog_is_petted_every_half_interval_only_while_healthy(systemd_socket):
    path, sock = systemd_socket
    sock.setblocking(False)
    healthy = True
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "10000000"})
    loop = asyncio.create_task(notifier.watchdog(lambda: healthy))
    await asyncio.sleep(12)  # pings at 0, 5 and 10 s
    pings = []
    while True:
        try:
            pings.append(sock.recv(100).decode())
        except BlockingIOError:
            break
    assert pings == ["WATCHDOG=1"] * 3
    healthy = False
    await asyncio.sleep(10)
    with pytest.raises(BlockingIOError):
        sock.recv(100)
    loop.cancel()
