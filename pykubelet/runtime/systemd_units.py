"""Pod slices through systemd's D-Bus API (the systemd cgroup driver).

Under the systemd driver systemd owns the cgroup tree: the kubelet asks it for each pod's slice
(StartTransientUnit, with the limits as properties) and stops the slice when the pod goes, and
so do we. Parent slices (kubepods.slice, kubepods-burstable.slice) come with a child: systemd
starts the slices a name implies. The calls block (the callers run them in a thread) and open
one connection each: a pod's start and end are rare next to the cost of keeping a bus
connection healthy.

A node without a D-Bus daemon (a kind node container has none) still has systemd's own socket,
/run/systemd/private, which only root may use: the calls go there when the system bus is not
there, as runc's systemd driver does. That socket is a direct line to systemd, not a bus, so
nothing is said to a bus daemon first (no Hello).
"""

from __future__ import annotations

import os
import time
from typing import Callable

JOB_SECONDS = 10.0  # how long systemd may take to start or stop a slice
SYSTEMD_RUNNING = "/run/systemd/system"  # sd_booted(): systemd is the init system
SYSTEMD_PRIVATE = "/run/systemd/private"  # systemd's own D-Bus socket (root only)
FIXED_AT_START = ("Description", "DefaultDependencies")  # SetUnitProperties refuses these


class SystemdError(OSError):
    """systemd is not there, or refused."""


def running() -> bool:
    return os.path.isdir(SYSTEMD_RUNNING)


def _send_on_system_bus(message):
    from jeepney.io.blocking import open_dbus_connection

    with open_dbus_connection(bus="SYSTEM") as conn:
        return conn.send_and_get_reply(message, timeout=JOB_SECONDS)


def _send_to_systemd_directly(message, path: str):
    """MESSAGE to systemd on its private socket at PATH; its reply."""
    from jeepney.io.blocking import prep_socket
    from jeepney.low_level import HeaderFields, Parser

    serial = 1  # the connection's only call
    sock = prep_socket(path, timeout=JOB_SECONDS)
    with sock:
        sock.settimeout(JOB_SECONDS)
        sock.sendall(message.serialise(serial=serial))
        parser = Parser()
        while True:
            reply = parser.get_next_message()
            if reply is None:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionResetError(f"systemd closed {path} before it answered")
                parser.add_data(data)
            elif reply.header.fields.get(HeaderFields.reply_serial) == serial:
                return reply


def _call(method: str, signature: str, body: tuple) -> tuple:
    from jeepney import DBusAddress, DBusErrorResponse, new_method_call
    from jeepney.wrappers import unwrap_msg

    manager = DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1",
                          interface="org.freedesktop.systemd1.Manager")
    message = new_method_call(manager, method, signature, body)
    try:
        try:
            reply = _send_on_system_bus(message)
        except (FileNotFoundError, ConnectionRefusedError):
            if not os.path.exists(SYSTEMD_PRIVATE):
                raise
            reply = _send_to_systemd_directly(message, SYSTEMD_PRIVATE)
    except (OSError, TimeoutError) as e:
        raise SystemdError(f"cannot reach systemd on the system bus or at {SYSTEMD_PRIVATE} ({e}); the "
                           f"systemd cgroup driver needs systemd and D-Bus") from None
    try:
        return unwrap_msg(reply)
    except DBusErrorResponse as e:
        raise SystemdError(f"systemd refused {method}: {e.name}: {' '.join(map(str, e.data))}") from None


def start_slice(name: str, properties: list[tuple[str, tuple[str, object]]]) -> None:
    """Start the slice with these properties, or set them on it when it exists already (a pod
    whose slice a previous agent made)."""
    try:
        _call("StartTransientUnit", "ssa(sv)a(sa(sv))", (name, "replace", properties, []))
    except SystemdError as e:
        if "UnitExists" not in str(e):
            raise
        settable = [p for p in properties if p[0] not in FIXED_AT_START]
        _call("SetUnitProperties", "sba(sv)", (name, True, settable))
        _call("StartUnit", "ss", (name, "replace"))


def stop_unit(name: str) -> None:
    """Stop a unit; one systemd does not know is stopped already."""
    try:
        _call("StopUnit", "ss", (name, "replace"))
    except SystemdError as e:
        if "NoSuchUnit" not in str(e):
            raise


def wait_until(condition: Callable[[], bool], seconds: float, interval: float = 0.05) -> bool:
    """systemd answers with a job and runs it after: poll for its result (True when it came)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True
