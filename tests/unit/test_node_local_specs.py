"""Host namespaces, sysctls, hostname and the pod cgroup in the CRI sandbox config; the
hook runner's results and messages; the grpc probe against an in-process health server."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.probes.check import grpc_check
from pykubelet.probes.grpc_health.v1 import health_pb2, health_pb2_grpc
from pykubelet.api.probe import ExecAction, HTTPGetAction, LifecycleHandler, SleepAction, TCPSocketAction
from pykubelet.probes.hooks import run_hook
from pykubelet.runtime import cgroups, specs


def pod(resources=None, **spec):
    container = {"name": "app", "image": "busybox:1.36", "resources": resources or {}}
    return parse_pod({"metadata": {"name": "web", "uid": "u1"}, "spec": {"containers": [container], **spec}},
                     where="t")


def namespaces(p) -> api.NamespaceOption:
    return specs.sandbox_config(p, 0, "/logs").linux.security_context.namespace_options


def test_namespaces_default_to_the_pod_with_a_pid_namespace_per_container():
    ns = namespaces(pod())
    assert (ns.network, ns.pid, ns.ipc) == (api.POD, api.CONTAINER, api.POD)


def test_host_pid_ipc_network_and_shared_process_namespace():
    ns = namespaces(pod(hostPID=True, hostIPC=True, hostNetwork=True))
    assert (ns.network, ns.pid, ns.ipc) == (api.NODE, api.NODE, api.NODE)
    assert namespaces(pod(shareProcessNamespace=True)).pid == api.POD


def test_sysctls_and_hostname_go_to_the_sandbox():
    config = specs.sandbox_config(pod(hostname="db-0", securityContext={"sysctls": [
        {"name": "net.ipv4.ip_local_port_range", "value": "20000 30000"}]}), 0, "/logs")
    assert dict(config.linux.sysctls) == {"net.ipv4.ip_local_port_range": "20000 30000"}
    assert config.hostname == "db-0"


@pytest.mark.parametrize("resources, parent", [
    ({"limits": {"cpu": "1", "memory": "1Gi"}}, "/kubepods/podu1"),
    ({"requests": {"memory": "1Gi"}}, "/kubepods/burstable/podu1"),
    ({}, "/kubepods/besteffort/podu1"),
])
def test_cgroup_parent_follows_the_qos_class(resources, parent):
    assert specs.sandbox_config(pod(resources), 0, "/logs").linux.cgroup_parent == parent


def test_pod_cgroups_are_found_in_every_hierarchy_and_removed_deepest_first(tmp_path):
    for hierarchy in ("memory", "cpu"):
        (tmp_path / hierarchy / "kubepods" / "burstable" / "podu1" / "leftover").mkdir(parents=True)
    (tmp_path / "memory" / "kubepods" / "besteffort" / "podu2").mkdir(parents=True)
    found = cgroups.pod_cgroup_dirs("u1", str(tmp_path))
    assert sorted(found) == [str(tmp_path / h / "kubepods" / "burstable" / "podu1") for h in ("cpu", "memory")]
    cgroups.remove_pod_cgroups("u1", str(tmp_path))
    assert cgroups.pod_cgroup_dirs("u1", str(tmp_path)) == []
    assert (tmp_path / "memory" / "kubepods" / "besteffort" / "podu2").is_dir()


def test_a_cgroup_root_puts_the_pods_cgroups_under_it_and_only_those_are_found_there(tmp_path):
    kubepods = cgroups.kubepods_under("/pkl-conformance")
    assert kubepods == "pkl-conformance/kubepods" and cgroups.kubepods_under("") == "kubepods"
    assert specs.sandbox_config(pod({}), 0, "/logs", kubepods=kubepods).linux.cgroup_parent == \
        "/pkl-conformance/kubepods/besteffort/podu1"
    (tmp_path / "memory" / "pkl-conformance" / "kubepods" / "besteffort" / "podu1").mkdir(parents=True)
    (tmp_path / "memory" / "kubepods" / "besteffort" / "podu2").mkdir(parents=True)  # another node's
    assert set(cgroups.pod_cgroups(str(tmp_path), kubepods)) == {"u1"}
    cgroups.remove_pod_cgroups("u1", str(tmp_path), kubepods)
    assert cgroups.pod_cgroups(str(tmp_path), kubepods) == {}
    assert (tmp_path / "memory" / "kubepods" / "besteffort" / "podu2").is_dir()


class FakeExec:
    """Answers ExecSync as a runtime would: exit code and output, or a deadline."""

    def __init__(self, exit_code=0, stdout=b"", stderr=b"", deadline=False):
        self.answer = api.ExecSyncResponse(exit_code=exit_code, stdout=stdout, stderr=stderr)
        self.deadline = deadline
        self.calls = []

    async def exec_sync(self, container_id, cmd, timeout):
        self.calls.append((container_id, cmd, timeout))
        if self.deadline:
            raise errors.DeadlineExceeded("ExecSync", "deadline exceeded")
        return self.answer


async def test_exec_hook_success_and_failure_messages():
    ok = FakeExec()
    assert await run_hook(ok, LifecycleHandler(ExecAction(("true",))), "app", (), "cid", "", "web_default(u1)", 30) == ""
    assert ok.calls == [("cid", ["true"], 30)]
    bad = FakeExec(exit_code=3, stderr=b"nope")
    message = await run_hook(bad, LifecycleHandler(ExecAction(("sh", "-c", "exit 3"))), "app", (), "cid", "",
                             "web_default(u1)", 30)
    assert message == ('Exec lifecycle hook ([sh -c exit 3]) for Container "app" in Pod "web_default(u1)" failed - '
                       "error: command 'sh -c exit 3' exited with 3: nope, message: \"nope\"")


async def test_http_hook_fails_only_without_an_answer():
    message = await run_hook(None, LifecycleHandler(HTTPGetAction(host="127.0.0.1", port=1, path="/x")), "app",
                             (), "cid", "", "web_default(u1)", 2)
    assert message.startswith('HTTP lifecycle hook (/x) for Container "app" in Pod "web_default(u1)" failed - error: ')


async def test_sleep_hook_is_cut_at_the_deadline_and_tcp_socket_is_not_a_hook():
    assert await run_hook(None, LifecycleHandler(SleepAction(100)), "app", (), "cid", "", "p", 0.05) == ""
    assert (await run_hook(None, LifecycleHandler(TCPSocketAction(port=80)), "app", (), "cid", "", "p", 1)
            ).startswith("Cannot run handler: invalid handler")


class Health(health_pb2_grpc.HealthServicer):
    status = health_pb2.HealthCheckResponse.SERVING

    def Check(self, request, context):  # noqa: N802
        if request.service == "missing":
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return health_pb2.HealthCheckResponse(status=self.status)


@pytest.fixture
def health_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = Health()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port, servicer
    server.stop(0)


async def test_grpc_probe_answers(health_server):
    port, servicer = health_server
    assert await grpc_check("127.0.0.1", port, "", 2) == (True, "")
    servicer.status = health_pb2.HealthCheckResponse.NOT_SERVING
    assert await grpc_check("127.0.0.1", port, "", 2) == (False, 'service unhealthy (responded with "NOT_SERVING")')
    ok, message = await grpc_check("127.0.0.1", port, "missing", 2)
    assert not ok and message.startswith("error: health rpc probe failed: rpc error: code = NotFound desc = unknown service")


async def test_grpc_probe_that_cannot_connect_times_out():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        ok, message = await grpc_check("127.0.0.1", port, "", 0.3)
    assert not ok and message == f'timeout: failed to connect service "127.0.0.1:{port}" within 0.3s'


def test_containers_record_their_termination_message_settings_and_pre_stop_hook():
    from pykubelet.runtime import labels

    p = parse_pod({"metadata": {"name": "web", "uid": "u1"}, "spec": {"containers": [{
        "name": "app", "image": "b", "terminationMessagePath": "/tmp/why",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}]}}, where="t")
    annotations = labels.container_annotations(p, p.containers[0], "h", "h2", 0)
    assert annotations[labels.TERMINATION_MESSAGE_PATH] == "/tmp/why"
    assert annotations[labels.TERMINATION_MESSAGE_POLICY] == "FallbackToLogsOnError"
    assert annotations[labels.PRE_STOP_HANDLER] == '{"sleep": {"seconds": 5}}'
    plain = labels.container_annotations(pod(), pod().containers[0], "h", "h2", 0)
    assert plain[labels.TERMINATION_MESSAGE_PATH] == "/dev/termination-log"
    assert labels.PRE_STOP_HANDLER not in plain


def pod_of(*containers, inits=()):
    def c(name, limits=None, requests=None, **extra):
        return {"name": name, "image": "b", "resources": {k: v for k, v in (("limits", limits),
                                                                              ("requests", requests)) if v}, **extra}
    return parse_pod({"metadata": {"name": "p", "uid": "u"}, "spec": {
        "containers": [c(f"c{i}", *args) for i, args in enumerate(containers)],
        "initContainers": [c(f"i{i}", *args[:2], **(args[2] if len(args) > 2 else {})) for i, args in enumerate(inits)]}},
        where="t")


def test_pod_cgroup_limits_for_a_guaranteed_pod_add_up_its_containers():
    from pykubelet.runtime.resources import pod_cgroup_resources

    r = pod_cgroup_resources(pod_of(({"cpu": "100m", "memory": "32Mi"},), ({"cpu": "200m", "memory": "16Mi"},)))
    assert (r.cpu_shares, r.cpu_period, r.cpu_quota, r.memory_limit_in_bytes) == (307, 100000, 30000, 48 * 2**20)


def test_pod_cgroup_limits_only_when_every_container_declares_one():
    from pykubelet.runtime.resources import pod_cgroup_resources

    r = pod_cgroup_resources(pod_of(({"memory": "64Mi"}, {"cpu": "500m", "memory": "16Mi"}), (None, {"cpu": "1"})))
    assert (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes) == (1536, 0, 0)
    best = pod_cgroup_resources(pod_of((None,)))
    assert (best.cpu_shares, best.cpu_quota, best.memory_limit_in_bytes) == (2, 0, 0)


def test_a_big_init_container_sets_the_pod_limit_but_sidecars_add_up():
    from pykubelet.runtime.resources import pod_cgroup_resources

    big_init = pod_of(({"memory": "32Mi"},), inits=(({"memory": "128Mi"},),))
    assert pod_cgroup_resources(big_init).memory_limit_in_bytes == 128 * 2**20
    sidecar = pod_of(({"memory": "32Mi"},), inits=(({"memory": "16Mi"}, None, {"restartPolicy": "Always"}),))
    assert pod_cgroup_resources(sidecar).memory_limit_in_bytes == 48 * 2**20


def test_pod_cgroup_files_are_written(tmp_path):
    r = api.LinuxContainerResources(cpu_shares=307, cpu_period=100000, cpu_quota=30000,
                                    memory_limit_in_bytes=48 * 2**20)
    cgroups.ensure_pod_cgroup("/kubepods/podu", r, str(tmp_path))
    cpu, memory = tmp_path / "cpu" / "kubepods" / "podu", tmp_path / "memory" / "kubepods" / "podu"
    assert (cpu / "cpu.shares").read_text() == "307"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "30000"
    assert (memory / "memory.limit_in_bytes").read_text() == str(48 * 2**20)
    cgroups.ensure_pod_cgroup("/kubepods/besteffort/podv", api.LinuxContainerResources(cpu_shares=2), str(tmp_path))
    assert (tmp_path / "memory" / "kubepods" / "besteffort" / "podv" / "memory.limit_in_bytes").read_text() == "-1"
