"""systemd-logind over the system D-Bus, for graceful node shutdown (node/shutdown.py): its
InhibitDelayMaxUSec, the drop-in that raises it, a "delay" inhibitor lock on shutdown, and its
PrepareForShutdown signal. The same calls, in the same order, as the kubelet's.

The signal comes through jeepney's asyncio router, which the agent's loop serves. The one-shot
calls go through jeepney's blocking connection in a thread: Inhibit answers with a file
descriptor (the lock is held as long as it stays open), and only that transport can receive one.
"""

from __future__ import annotations

import asyncio
import os
from typing import AsyncIterator, Protocol

from pykubelet.util.timeouts import within

LOGIND = ("/org/freedesktop/login1", "org.freedesktop.login1", "org.freedesktop.login1.Manager")
SYSTEMD = ("/org/freedesktop/systemd1", "org.freedesktop.systemd1", "org.freedesktop.systemd1.Manager")
DROP_IN_DIR = "/etc/systemd/logind.conf.d"
DROP_IN = "99-kubelet.conf"
CALL_SECONDS = 10.0
SIGHUP = 1


class LogindError(OSError):
    """logind (or the system bus) is not there, or refused."""


class Logind(Protocol):
    """What the shutdown manager asks of logind (a fake in the tests)."""

    async def inhibit_delay(self) -> float:
        """InhibitDelayMaxUSec, in seconds: the longest logind lets a delay lock hold a shutdown."""
        ...

    async def override_inhibit_delay(self, seconds: float) -> None:
        """Write the drop-in that raises InhibitDelayMaxSec to `seconds`."""
        ...

    async def reload(self) -> None:
        """Have logind read its configuration again (SIGHUP through systemd)."""
        ...

    async def inhibit(self) -> int:
        """Take a delay lock on shutdown; the file descriptor that holds it."""
        ...

    def release(self, lock: int) -> None:
        """Close the lock's file descriptor: logind goes on with the shutdown."""
        ...

    def shutdown_signals(self) -> AsyncIterator[bool]:
        """PrepareForShutdown's argument, each time logind sends it; ends when the bus goes."""
        ...


def _call(target: tuple[str, str, str], method: str, signature: str, body: tuple, *, fds: bool = False,
          interface: str = "") -> tuple:
    """One method call on a connection of its own (blocking: run it in a thread)."""
    from jeepney import DBusAddress, DBusErrorResponse, new_method_call
    from jeepney.io.blocking import open_dbus_connection
    from jeepney.wrappers import unwrap_msg

    path, bus_name, default_interface = target
    address = DBusAddress(path, bus_name=bus_name, interface=interface or default_interface)
    try:
        with open_dbus_connection(bus="SYSTEM", enable_fds=fds) as conn:
            reply = conn.send_and_get_reply(new_method_call(address, method, signature, body), timeout=CALL_SECONDS)
    except (OSError, TimeoutError, ValueError) as e:  # ValueError: no system bus address at all
        raise LogindError(f"cannot reach {bus_name} on the system bus: {e}") from None
    try:
        return unwrap_msg(reply)
    except DBusErrorResponse as e:
        raise LogindError(f"{bus_name} refused {method}: {e.name}: {' '.join(map(str, e.data))}") from None


def drop_in_text(seconds: float) -> str:
    return f"# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={seconds:.0f}\n"


def _write_drop_in(seconds: float, directory: str) -> None:
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        path = os.path.join(directory, DROP_IN)
        with open(path, "w", encoding="utf-8") as f:
            f.write(drop_in_text(seconds))
        os.chmod(path, 0o644)
    except OSError as e:
        raise LogindError(f"failed writing logind shutdown inhibit override file {directory}/{DROP_IN}: "
                          f"{e.strerror}") from None


class SystemLogind:
    """The real logind, on the system bus."""

    def __init__(self, drop_in_dir: str = DROP_IN_DIR):
        self.drop_in_dir = drop_in_dir

    async def inhibit_delay(self) -> float:
        (value,) = await asyncio.to_thread(_call, LOGIND, "Get", "ss", (LOGIND[2], "InhibitDelayMaxUSec"),
                                           interface="org.freedesktop.DBus.Properties")
        signature, usec = value
        if signature != "t":
            raise LogindError(f"InhibitDelayMaxUSec from logind is not a uint64 as expected: {value!r}")
        return usec / 1e6

    async def override_inhibit_delay(self, seconds: float) -> None:
        await asyncio.to_thread(_write_drop_in, seconds, self.drop_in_dir)

    async def reload(self) -> None:
        await asyncio.to_thread(_call, SYSTEMD, "KillUnit", "ssi", ("systemd-logind.service", "all", SIGHUP))

    async def inhibit(self) -> int:
        (fd,) = await asyncio.to_thread(_call, LOGIND, "Inhibit", "ssss",
                                        ("shutdown", "kubelet", "Kubelet needs time to handle node shutdown",
                                         "delay"), fds=True)
        return fd.to_raw_fd()

    def release(self, lock: int) -> None:
        try:
            os.close(lock)
        except OSError:
            pass  # closed already: logind has no lock of ours to wait for

    async def shutdown_signals(self) -> AsyncIterator[bool]:
        from jeepney import MatchRule, message_bus
        from jeepney.io.asyncio import open_dbus_connection

        rule = MatchRule(type="signal", interface=LOGIND[2], member="PrepareForShutdown", path=LOGIND[0])
        try:
            # A plain connection read here, not a router: its receive raises when the bus goes,
            # where a router's filter queue would wait for ever.
            conn = await within(open_dbus_connection(bus="SYSTEM"), CALL_SECONDS)
        except (OSError, EOFError, ValueError, asyncio.TimeoutError) as e:
            raise LogindError(f"cannot reach the system bus to watch for shutdown: {e}") from None
        try:
            await conn.send(message_bus.AddMatch(rule))
            while True:
                message = await conn.receive()
                if rule.matches(message) and message.body and isinstance(message.body[0], bool):
                    yield message.body[0]
        except (OSError, EOFError) as e:
            raise LogindError(f"lost the system bus watching for shutdown: {str(e) or 'closed'}") from None
        finally:
            await conn.close()
