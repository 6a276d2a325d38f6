"""doctor's logic that needs no runtime: settings found on a running agent, the agent's own facts
judged, resource pressure and certificates with their evidence, the summary and exit code."""

from __future__ import annotations

import asyncio
import datetime
import threading

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pykubelet.api.eviction import Threshold, parse_thresholds
from pykubelet.config import Settings, build_parser, settings_from_args
from pykubelet.diagnose import doctor, doctor_agent, doctor_host
from pykubelet.diagnose.checks import FAIL, OK, WARN, Node
from pykubelet.server import local
from pykubelet.status.manager import StatusManager


def test_the_running_agents_settings_come_back_whole_from_its_json():
    settings = settings_from_args(build_parser().parse_args(
        ["--root-dir", "/srv/kubelet", "--network-mode", "runtime", "--cni-bin-dir", "/a,/b", "--healthz-port", "1"]))
    settings.cluster.eviction_hard = parse_thresholds({"nodefs.available": "7%", "memory.available": "1Gi"})
    again = doctor.settings_from_json(local.settings_json(settings))
    assert again == settings
    # An agent newer than this doctor may have settings it does not know: they are ignored.
    assert doctor.settings_from_json({**local.settings_json(settings), "future": 1}) == settings


def node_with(**agent) -> Node:
    return Node(Settings(), "test", agent=agent or None, agent_url="")


class FakeAgentEndpoint:
    """The agent's /healthz, served from a thread, for doctor_agent.check (which uses urllib)."""

    def __init__(self, healthy: bool):
        self.healthy = healthy
        self.port = 0
        self._ready = threading.Event()

    def __enter__(self) -> "FakeAgentEndpoint":
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        app = local.build_healthz_app({"pleg": lambda: self.healthy})
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)


def test_an_agent_with_a_dead_loop_and_a_stale_pleg_fails_with_both():
    import time

    with FakeAgentEndpoint(healthy=False) as endpoint:
        node = node_with(pid=42, loops={"pleg": {"alive": True, "error": ""},
                                         "network": {"alive": False, "error": "OSError('boom')"}},
                         pods=0, last_sync=0, pleg={"last_relist": time.time() - 400, "healthy": False,
                                                    "threshold_seconds": 180})
        node.agent_url = f"http://127.0.0.1:{endpoint.port}"
        doctor_agent.check(node)
    got = [(c.status, c.title) for c in node.checks]
    assert got[0] == (FAIL, "running (pid 42) but /healthz fails: [-]pleg failed\nhealthz check failed")
    assert got[1] == (FAIL, "1 of its loops died: the agent stops itself soon")
    assert node.checks[1].evidence == ["network: OSError('boom')"]
    assert got[3][0] == FAIL and got[3][1].startswith("PLEG is not healthy: last relist 6m")


def test_a_healthy_agent_is_ok():
    import time

    with FakeAgentEndpoint(healthy=True) as endpoint:
        node = node_with(pid=42, loops={"pleg": {"alive": True, "error": ""}}, pods=2, last_sync=time.time() - 1,
                         pleg={"last_relist": time.time() - 0.5, "healthy": True, "threshold_seconds": 180})
        node.agent_url = f"http://127.0.0.1:{endpoint.port}"
        doctor_agent.check(node)
    assert [c.status for c in node.checks] == [OK, OK, OK, OK]
    assert node.checks[2].title.startswith("2 pods, last pod sync ")


def test_pressure_names_the_signal_its_numbers_and_the_threshold(tmp_path):
    node = Node(Settings(root_dir=str(tmp_path)), "test")
    node.settings.cluster.eviction_hard = {"nodefs.available": Threshold("nodefs.available", quantity=1 << 62),
                                           "memory.available": Threshold("memory.available", quantity=1)}
    doctor_host.pressure(node)
    by_title = {c.title: c for c in node.checks}
    disk = by_title["DiskPressure: nodefs.available below its evictionHard threshold"]
    assert disk.status == FAIL and disk.evidence[0].startswith(f"nodefs.available on {tmp_path}: ")
    assert disk.evidence[0].endswith("evictionHard 4194304.0 TiB")
    assert by_title["no MemoryPressure"].status == OK


def test_memory_pressure_is_measured_as_the_eviction_manager_measures_it(tmp_path, monkeypatch):
    """memory.available is the machine's memory less the root cgroup's working set (what the
    node's MemoryPressure comes from), not /proc/meminfo's MemAvailable."""
    from pykubelet.server import cgroup_stats

    gib, mib = 2**30, 2**20
    monkeypatch.setattr(cgroup_stats, "memory_capacity", lambda: 8 * gib)
    monkeypatch.setattr(cgroup_stats, "cgroup_usage", lambda relative, *a: cgroup_stats.CgroupUsage(
        1, 8 * gib, 8 * gib - 50 * mib, 0, 0, 0) if relative == "" else None)
    node = Node(Settings(root_dir=str(tmp_path)), "test")
    node.settings.cluster.eviction_hard = {"memory.available": Threshold("memory.available", quantity=100 * mib)}
    doctor_host.pressure(node)
    (memory,) = node.checks
    assert (memory.status, memory.title) == (FAIL, "MemoryPressure: memory.available below its evictionHard threshold")
    assert memory.evidence == ["memory.available: 50.0 MiB of 8.0 GiB (1%); evictionHard 100.0 MiB"]


def certificate(path, cn: str, days_left: float, groups: tuple[str, ...] = ()) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
                     + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=400))
            .not_valid_after(now + datetime.timedelta(days=days_left)).sign(key, hashes.SHA256()))
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


@pytest.mark.parametrize("days, status, words", [
    (-3, FAIL, "expired 3 days ago"),
    (10.5, WARN, "expires in 10 days"),
    (365, OK, "valid for 364 more days"),
])
def test_certificates_close_to_expiry_warn_and_expired_ones_fail(tmp_path, days, status, words):
    node = Node(Settings(), "test")
    path = certificate(tmp_path / "c.crt", "system:node:n1", days, ("system:nodes",))
    doctor_host.certificate_check(node, "Certificates", "client certificate", path, expect_cn="system:node:n1")
    (check,) = node.checks
    assert check.status == status and words in check.title
    assert check.title.startswith("client certificate 'system:node:n1' (groups system:nodes)")
    assert check.more == f"openssl x509 -noout -subject -dates -in {path}"


def test_a_certificate_for_another_node_is_a_warning(tmp_path):
    node = Node(Settings(), "test")
    path = certificate(tmp_path / "c.crt", "system:node:other", 365)
    doctor_host.certificate_check(node, "API server", "client certificate", path, expect_cn="system:node:n1")
    assert node.checks[0].status == WARN
    assert "the Node authorizer expects 'system:node:n1' for this node" in node.checks[0].evidence


def test_the_summary_puts_not_ready_causes_first():
    node = Node(Settings(), "test")
    node.add("Agent", FAIL, "the agent is not running")
    node.add("Container runtime", OK, "containerd answers")
    node.add("Certificates", FAIL, "serving certificate expired")
    node.add("Clock", WARN, "not synchronized")
    assert doctor.summary(node) == ["2 FAIL, 1 WARN, 1 OK.", "The node cannot be Ready:",
                                    "  - the agent is not running", "Also wrong:",
                                    "  - Certificates: serving certificate expired"]
    text = doctor.render(node)
    assert "Agent\n  FAIL  the agent is not running\n" in text


def test_with_server_tls_bootstrap_the_serving_certificate_checked_is_the_one_from_the_cluster(tmp_path):
    settings = Settings()
    settings.root_dir, settings.cluster.cert_dir = str(tmp_path), str(tmp_path / "pki")
    settings.server.server_tls_bootstrap = True
    node = Node(settings, "test")
    doctor_host.certificates(node)
    assert node.checks[0].status == WARN and "waits for approval: kubectl get csr" in node.checks[0].title
    (tmp_path / "pki").mkdir()
    certificate(tmp_path / "pki" / "kubelet-server-current.pem", "system:node:n1", 365, ("system:nodes",))
    node = Node(settings, "test")
    doctor_host.certificates(node)
    assert node.checks[0].status == OK and "'system:node:n1'" in node.checks[0].title


def test_doctor_checks_the_certificates_in_the_cert_dir_not_under_the_root_dir(tmp_path):
    settings = Settings()
    settings.root_dir, settings.cluster.cert_dir = str(tmp_path / "root"), str(tmp_path / "certs")
    (tmp_path / "certs").mkdir()
    certificate(tmp_path / "certs" / "kubelet.crt", "n1", 365, ())
    certificate(tmp_path / "certs" / "kubelet-client-current.pem", "system:node:n1", 365, ("system:nodes",))
    node = Node(settings, "test")
    doctor_host.certificates(node)
    checked = [check.title for check in node.checks]
    assert len(checked) == 2 and all("valid for" in title for title in checked), checked
    assert all(str(tmp_path / "certs") in " ".join(check.evidence) for check in node.checks)
