"""The CSI drivers registered on this node: name -> socket and highest CSI version (pure).

Filled by plugin registration (registration.py); read by every volume operation, which finds the
driver's socket here by the name in the volume's spec. A driver that is not (or no longer)
registered is an error in the kubelet's words, which a FailedMount event carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pykubelet.volumes.csi.node_client import CsiNodeClient

_VERSION = re.compile(r"\s*v?(\d+(?:\.\d+)+)\s*")


class DriverNotRegistered(Exception):
    """No registered driver has the name (yet: it may register later, so the caller retries)."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(f"driver name {name} not found in the list of registered CSI drivers" if name
                         else "driver name is empty")


class VersionError(ValueError):
    """The driver's supported versions leave nothing this node can speak."""


def parse_version(text: str) -> tuple[int, ...] | None:
    """'1.0.0', 'v1.2' -> (1, 0, 0), (1, 2); None when it is not a version (at least major.minor)."""
    match = _VERSION.fullmatch(text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def highest_supported_version(versions: list[str]) -> tuple[int, ...]:
    """The highest version with major 1 (CSI 1.x is backwards compatible; 0.x is no longer
    supported, 2.x need not be compatible); VersionError when there is none."""
    if not versions:
        raise VersionError("Plugin returned an empty list for supported versions")
    parsed = [v for v in map(parse_version, versions) if v is not None and v[0] <= 1]
    if not parsed or max(parsed)[0] != 1:
        raise VersionError(f"None of the versions specified {versions} are supported")
    return max(parsed)


@dataclass(frozen=True)
class Driver:
    name: str
    endpoint: str
    """The driver's own socket on the host (its node service)."""
    version: tuple[int, ...]


class DriverRegistry:
    """The registered drivers by name; one entry per name (a newer version replaces an older)."""

    def __init__(self) -> None:
        self._drivers: dict[str, Driver] = {}

    def get(self, name: str) -> Driver:
        if not name or name not in self._drivers:
            raise DriverNotRegistered(name)
        return self._drivers[name]

    def client(self, name: str) -> CsiNodeClient:
        """The node service client of the driver `name`; DriverNotRegistered when there is none."""
        return CsiNodeClient(self.get(name).endpoint)

    def names(self) -> list[str]:
        return sorted(self._drivers)

    def check_can_register(self, name: str, versions: list[str]) -> tuple[int, ...]:
        """The version the driver would be registered with; VersionError when it cannot be: no
        supported version, or a driver of that name already registered with one as high."""
        version = highest_supported_version(versions)
        existing = self._drivers.get(name)
        if existing is not None and not existing.version < version:
            raise VersionError(f"Another driver with the same name is already registered with a higher "
                               f"supported version: {'.'.join(map(str, existing.version))}")
        return version

    def add(self, driver: Driver) -> None:
        self._drivers[driver.name] = driver

    def remove(self, name: str) -> None:
        self._drivers.pop(name, None)
