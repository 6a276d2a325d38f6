"""systemd's service notification protocol (sd_notify): READY=1, STOPPING=1, WATCHDOG=1, STATUS=.

systemd hands a service started with Type=notify (or any NotifyAccess) the path of a datagram
socket in NOTIFY_SOCKET ("@name" for the abstract namespace), and WATCHDOG_USEC (with
WATCHDOG_PID, the process it is meant for) when the unit sets WatchdogSec. Each notification
is one datagram of newline-separated KEY=VALUE assignments. Outside systemd there is no
socket and every call is a no-op, as sd_notify(3) is.

The agent sends READY=1 once it serves and has synced, STOPPING=1 when it stops, and, like the
kubelet, WATCHDOG=1 every WatchdogSec/2 only while its health checks pass, so a wedged agent
is restarted by systemd. A watchdog of 1 s or less is refused, as the kubelet refuses it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Callable, Mapping

from pykubelet.util.log import get_logger

log = get_logger(__name__)

MIN_WATCHDOG_SECONDS = 1.0


class WatchdogError(ValueError):
    """WatchdogSec that the agent cannot keep."""


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None, pid: int | None = None):
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self.watchdog_seconds = self._watchdog(env, os.getpid() if pid is None else pid)
        self._warned = False

    @staticmethod
    def _watchdog(env: Mapping[str, str], pid: int) -> float | None:
        usec = env.get("WATCHDOG_USEC", "")
        if not usec or (env.get("WATCHDOG_PID") and env.get("WATCHDOG_PID") != str(pid)):
            return None  # no watchdog, or one meant for another process (our parent's)
        try:
            seconds = int(usec) / 1e6
        except ValueError:
            raise WatchdogError(f"WATCHDOG_USEC={usec!r} is not a number of microseconds") from None
        if seconds <= MIN_WATCHDOG_SECONDS:
            raise WatchdogError(f"WatchdogSec={seconds:g}s is too short: the kubelet needs more than "
                                f"{MIN_WATCHDOG_SECONDS:g}s")
        return seconds

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, *assignments: str) -> bool:
        """Send one datagram; False (logged once) when it could not be sent, never an exception."""
        if not self.address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.setblocking(False)  # systemd reads at once; a full queue is not worth waiting on
                sock.sendto("\n".join(assignments).encode(), self.address)
            return True
        except OSError as e:
            if not self._warned:
                log.warning("Could not notify systemd", socket=os.environ.get("NOTIFY_SOCKET", ""), err=str(e))
                self._warned = True
            return False

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def stopping(self, status: str = "") -> bool:
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    async def watchdog(self, healthy: Callable[[], bool]) -> None:
        """A loop: WATCHDOG=1 every WatchdogSec/2 while `healthy()` holds (missed pings mean a restart)."""
        if self.watchdog_seconds is None:
            await asyncio.Event().wait()  # nothing to do, and a loop must not end
        interval = self.watchdog_seconds / 2
        while True:
            if healthy():
                self.notify("WATCHDOG=1")
            else:
                log.warning("Health checks failing: not petting the systemd watchdog")
            await asyncio.sleep(interval)
