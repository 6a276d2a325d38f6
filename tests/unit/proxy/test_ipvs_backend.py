"""The IPVS backend's syncs against an in-memory IPVS (pyroute2's socket replaced, its records
encoded and decoded for real): what a Service change does to the virtual and real servers,
kube-ipvs0's addresses and the rules, graceful removal end to end, and partial syncs that do
not dump the kernel."""

from __future__ import annotations

import errno
from contextlib import asynccontextmanager

import pytest
from pyroute2.netlink.exceptions import NetlinkError

from pykubelet.proxy import ipvs, ipvs_kernel
from pykubelet.proxy.ipvs_state import IpvsSettings
from tests.unit.proxy.helpers import ep, ipvs_roundtrip, svc

SVC_KEY = ("IPVS_SVC_ATTR_ADDR", "IPVS_SVC_ATTR_PORT", "IPVS_SVC_ATTR_PROTOCOL")


class FakeIPVS:
    """The kernel's IPVS table: virtual servers (their attributes) and real servers (weight, conns)."""

    def __init__(self):
        self.services: dict[tuple, dict] = {}
        self.dests: dict[tuple, dict[tuple, dict]] = {}
        self.dumps = 0

    async def setup_endpoint(self):
        pass

    def close(self):
        pass

    async def service(self, command, service=None):
        attrs = dict(service.dump_nla()["attrs"]) if service is not None else {}
        key = tuple(attrs.get(k) for k in SVC_KEY)
        if command == "dump":
            self.dumps += 1
            return [ipvs_roundtrip(("IPVS_CMD_ATTR_SERVICE", {"attrs": list(a.items())})) for a in self.services.values()]
        if command == "add":
            if key in self.services:
                raise NetlinkError(errno.EEXIST)
            if attrs["IPVS_SVC_ATTR_SCHED_NAME"] not in ("rr", "lc", "sh", "mh"):
                raise NetlinkError(errno.ENOENT)  # what the kernel says of a scheduler it has no module for
            self.services[key], self.dests[key] = attrs, {}
        elif command == "set":
            self.services[key] = attrs
        elif command == "del":
            self.services.pop(key), self.dests.pop(key)
        return []

    async def dest(self, command, service, dest=None):
        skey = tuple(dict(service.dump_key()["attrs"]).get(k) for k in SVC_KEY)
        if skey not in self.dests:
            raise NetlinkError(errno.ESRCH)
        table = self.dests[skey]
        if command == "dump":
            return [ipvs_roundtrip(("IPVS_CMD_ATTR_DEST", {"attrs": [
                ("IPVS_DEST_ATTR_ADDR", a), ("IPVS_DEST_ATTR_ADDR_FAMILY", 2), ("IPVS_DEST_ATTR_PORT", p),
                ("IPVS_DEST_ATTR_WEIGHT", d["weight"]), ("IPVS_DEST_ATTR_ACTIVE_CONNS", d["active"]),
                ("IPVS_DEST_ATTR_INACT_CONNS", 0)]})) for (a, p), d in table.items()]
        attrs = dict(dest.dump_nla()["attrs"])
        key = (attrs["IPVS_DEST_ATTR_ADDR"], attrs["IPVS_DEST_ATTR_PORT"])
        if command == "add":
            if key in table:
                raise NetlinkError(errno.EEXIST)
            table[key] = {"weight": attrs["IPVS_DEST_ATTR_WEIGHT"], "active": 0}
        elif command == "set":
            table[key]["weight"] = attrs["IPVS_DEST_ATTR_WEIGHT"]
        elif command == "del":
            if key not in table:
                raise NetlinkError(errno.ENOENT)
            del table[key]
        return []

    def weights(self, address: str, port: int, protocol: int = 6) -> dict[str, int]:
        return {f"{a}:{p}": d["weight"] for (a, p), d in self.dests[(address, port, protocol)].items()}


@pytest.fixture
def kernel(monkeypatch):
    fake, bound, restores = FakeIPVS(), set(), []

    @asynccontextmanager
    async def iproute():
        yield None

    async def addresses(_):
        return set(bound), ["192.168.1.10"]

    async def run(*argv, stdin=None):
        if stdin is not None:
            restores.append(stdin)
        return ""

    async def ipsets(want, have):
        return {k: set(v) for k, v in want.items()}

    async def ensure_dummy(_):
        return 7

    monkeypatch.setattr(ipvs_kernel, "AsyncIPVS", lambda: fake)
    monkeypatch.setattr(ipvs, "AsyncIPRoute", iproute)
    monkeypatch.setattr(ipvs_kernel, "ensure_dummy", ensure_dummy)
    monkeypatch.setattr(ipvs_kernel, "addresses", addresses)
    monkeypatch.setattr(ipvs_kernel, "bind", lambda _, __, a: _async(bound.add(a)))
    monkeypatch.setattr(ipvs_kernel, "unbind", lambda _, __, a: _async(bound.discard(a)))
    monkeypatch.setattr(ipvs.ipvs_ipsets, "sync", ipsets)
    monkeypatch.setattr(ipvs, "run", run)
    monkeypatch.setattr(ipvs, "_write_sysctls", lambda values: None)
    fake.bound, fake.restores = bound, restores
    return fake


async def _async(_):
    return None


def ports(*sps):
    return {p.name: p for p in sps}


async def test_services_come_and_go_with_their_addresses_and_removed_endpoints_drain(kernel, monkeypatch):
    backend = ipvs.IpvsBackend(IpvsSettings(cluster_cidrs=("10.244.0.0/16",)))
    web = svc(endpoints=(ep("10.244.1.5"), ep("10.244.1.6")), node_port=30080)
    await backend.sync(ports(web), None, False)
    assert kernel.weights("10.20.30.41", 80) == {"10.244.1.5:80": 1, "10.244.1.6:80": 1}
    assert kernel.weights("192.168.1.10", 30080) == {"10.244.1.5:80": 1, "10.244.1.6:80": 1}
    assert kernel.bound == {"10.20.30.41"} and "-I PREROUTING" in kernel.restores[-1]

    kernel.dests[("10.20.30.41", 80, 6)][("10.244.1.6", 80)]["active"] = 2  # a connection in flight
    dumps = kernel.dumps
    await backend.sync(ports(svc(endpoints=(ep("10.244.1.5"),), node_port=30080)), {web.name}, False)
    assert kernel.dumps == dumps  # a partial sync works from what the last one left
    assert kernel.weights("10.20.30.41", 80) == {"10.244.1.5:80": 1, "10.244.1.6:80": 0}  # drains
    assert kernel.weights("192.168.1.10", 30080) == {"10.244.1.5:80": 1}  # no connection: gone at once
    assert set(backend.terminating) == {"10.20.30.41:80/TCP/10.244.1.6:80"}

    kernel.dests[("10.20.30.41", 80, 6)][("10.244.1.6", 80)]["active"] = 0
    monkeypatch.setattr(backend, "_checked", backend._checked - ipvs.GRACEFUL_CHECK_INTERVAL)
    await backend.sync(ports(svc(endpoints=(ep("10.244.1.5"),), node_port=30080)), set(), False)
    assert kernel.weights("10.20.30.41", 80) == {"10.244.1.5:80": 1} and backend.terminating == {}

    await backend.sync({}, None, False)
    assert kernel.services == {} and kernel.bound == set()


async def test_udp_real_servers_go_at_once_and_a_restart_resets_drained_weights(kernel):
    dns = svc(name="dns", protocol="UDP", port=53, endpoints=(ep("10.244.1.5", port=53), ep("10.244.1.6", port=53)))
    first = ipvs.IpvsBackend(IpvsSettings())
    await first.sync(ports(dns), None, False)
    kernel.dests[("10.20.30.41", 53, 17)][("10.244.1.6", 53)]["active"] = 4
    await first.sync(ports(svc(name="dns", protocol="UDP", port=53, endpoints=(ep("10.244.1.5", port=53),))),
                     {dns.name}, False)
    assert kernel.weights("10.20.30.41", 53, 17) == {"10.244.1.5:53": 1}
    kernel.dests[("10.20.30.41", 53, 17)][("10.244.1.5", 53)]["weight"] = 0  # as a crashed run may leave it
    await ipvs.IpvsBackend(IpvsSettings()).sync(ports(dns), None, False)
    assert kernel.weights("10.20.30.41", 53, 17) == {"10.244.1.5:53": 1, "10.244.1.6:53": 1}


async def test_a_failed_sync_makes_the_next_one_full(kernel, monkeypatch):
    backend = ipvs.IpvsBackend(IpvsSettings())
    web = svc(endpoints=(ep("10.244.1.5"),))

    async def broken(*argv, stdin=None):
        raise ipvs.CommandFailed(argv, 1, "no")
    monkeypatch.setattr(ipvs, "run", broken)
    with pytest.raises(ipvs.SyncFailed, match="failed"):
        await backend.sync(ports(web), None, False)
    assert backend._members is None and backend._state == {}


async def test_a_scheduler_the_kernel_lacks_stops_the_start_and_the_probe_leaves_nothing(kernel):
    with pytest.raises(RuntimeError, match="the IPVS scheduler 'fancy' is not available"):
        await ipvs.IpvsBackend(IpvsSettings(scheduler="fancy")).prepare()
    await ipvs.IpvsBackend(IpvsSettings(scheduler="lc")).prepare()
    assert kernel.services == {}
