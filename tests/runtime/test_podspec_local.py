"""The node-local PodSpec on the real containerd: lifecycle hooks, termination messages, grpc
probes, the managed /etc/hosts, host namespaces, sysctls and pod cgroups."""

from __future__ import annotations

import http.server
import json
import math
import os
import pathlib
import threading
import time
from concurrent import futures

import grpc
import pytest

from pykubelet.probes.grpc_health.v1 import health_pb2, health_pb2_grpc
from tests.helpers import wait_for
from tests.runtime.conftest import (BUSYBOX, NODE, AgentProcess, containers_of, free_port, main_status, phase,
                                    pod_manifest, write_manifest)


def log_lines(agent, name: str, pod, container: str = "main") -> list[str]:
    path = agent.logs_dir / f"default_{name}_{pod['metadata']['uid']}" / container / "0.log"
    return [line.split(" ", 3)[3] for line in path.read_text().splitlines()] if path.exists() else []


async def wait_lines(agent, name: str, pod, count: int) -> list[str]:
    return await wait_for(lambda: len(log_lines(agent, name, pod)) >= count and log_lines(agent, name, pod), 15,
                          f"{count} lines of output from {name}", describe=agent.describe)


def statuses(pod) -> dict[str, dict]:
    return {s["name"]: s for s in pod["status"]["containerStatuses"]}


@pytest.fixture
async def verbose_agent(cri, tmp_path, manifests):
    """An agent logging at --v 4, where standalone events show up (reason=...)."""
    process = AgentProcess(tmp_path, manifests, "--v", "4").start()
    await wait_for(lambda: process.pods() is not None, 20, "the agent's /pods", describe=process.describe)
    yield process
    process.shutdown()


class _Recorder(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, str]] = []

    def do_GET(self):  # noqa: N802 (the http.server API)
        self.requests.append((self.path, self.headers.get("User-Agent", "")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_recorder():
    """An HTTP server on the host that records what it is asked (the hooks' target)."""
    _Recorder.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], _Recorder.requests
    server.shutdown()


async def test_post_start_hook_runs_right_after_start_and_the_container_sees_its_work(agent, manifests):
    manifest = pod_manifest("poststart", "while [ ! -f /tmp/started ]; do sleep 0.1; done; cat /tmp/started; "
                                         "sleep 3600")
    manifest["spec"]["containers"][0]["lifecycle"] = {
        "postStart": {"exec": {"command": ["sh", "-c", "echo written-by-poststart > /tmp/started"]}}}
    write_manifest(manifests, "poststart", manifest)
    name = f"poststart-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    assert (await wait_lines(agent, name, pod, 1))[0] == "written-by-poststart"
    assert main_status(pod)["restartCount"] == 0


async def test_failing_post_start_hook_kills_the_container_and_it_is_restarted(verbose_agent, manifests):
    manifest = pod_manifest("badhook", "sleep 3600", grace=1)
    manifest["spec"]["containers"][0]["lifecycle"] = {
        "postStart": {"exec": {"command": ["sh", "-c", "echo hook-broke >&2; exit 3"]}}}
    write_manifest(manifests, "badhook", manifest)
    name = f"badhook-{NODE}"
    pod = await verbose_agent.wait_pod(name, lambda p: main_status(p)["restartCount"] >= 1, 40,
                                       "restarted after the failed postStart hook")
    assert main_status(pod)["lastState"]["terminated"]["exitCode"] in (137, 143)  # killed, not crashed
    log = verbose_agent.log()
    assert 'reason="FailedPostStartHook" message="PostStartHook failed"' in log
    assert "Exec lifecycle hook ([sh -c echo hook-broke >&2; exit 3])" in log and "exited with 3" in log


async def test_pre_stop_hook_runs_before_the_stop_and_its_time_counts_in_the_grace_period(agent, manifests,
                                                                                          tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    manifest = pod_manifest("prestop", "trap 'echo term $(date +%s) >> /data/log; exit 0' TERM; "
                                       "while true; do sleep 0.2; done", grace=4)
    manifest["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": str(data)}}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    # The hook outlasts the grace period: it is cut off there, and the stop gets the minimum (2 s).
    manifest["spec"]["containers"][0]["lifecycle"] = {
        "preStop": {"exec": {"command": ["sh", "-c", "echo prestop $(date +%s) >> /data/log; sleep 60"]}}}
    path = write_manifest(manifests, "prestop", manifest)
    name = f"prestop-{NODE}"
    await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")

    removed_at = time.time()
    path.unlink()
    await wait_for(lambda: name not in (agent.pods() or {}), 30, "the pod gone", describe=agent.describe)
    took = time.time() - removed_at
    lines = (data / "log").read_text().split("\n")
    assert [line.split()[0] for line in lines if line] == ["prestop", "term"]
    term_at = int(lines[1].split()[1])
    assert term_at >= math.floor(removed_at) + 3, "SIGTERM came only after the preStop hook had its grace period"
    assert took < 20, "the 60 s hook must not hold the pod past its grace period"


async def test_pre_stop_hook_of_a_pod_removed_while_the_agent_was_down_still_runs(agent, manifests, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    manifest = pod_manifest("orphan", "sleep 3600", grace=5)
    manifest["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": str(data)}}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    manifest["spec"]["containers"][0]["lifecycle"] = {
        "preStop": {"exec": {"command": ["sh", "-c", "echo recorded-prestop-ran > /data/log"]}}}
    path = write_manifest(manifests, "orphan", manifest)
    name = f"orphan-{NODE}"
    await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    agent.stop()
    path.unlink()  # the spec is gone: only the container's annotations still know the hook
    agent.start()
    await wait_for(lambda: (data / "log").exists(), 30, "the recorded preStop hook to run",
                   describe=agent.describe)
    assert (data / "log").read_text() == "recorded-prestop-ran\n"


async def test_http_post_start_and_sleep_pre_stop_hooks(agent, manifests, tmp_path, http_recorder):
    port, requests = http_recorder
    data = tmp_path / "data"
    data.mkdir()
    manifest = pod_manifest("hooks", "trap 'echo term $(date +%s) >> /data/log; exit 0' TERM; "
                                     "while true; do sleep 0.2; done", grace=10)
    manifest["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": str(data)}}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    manifest["spec"]["containers"][0]["lifecycle"] = {
        "postStart": {"httpGet": {"host": "127.0.0.1", "port": port, "path": "/started",
                                  "httpHeaders": [{"name": "X-Hook", "value": "yes"}]}},
        "preStop": {"sleep": {"seconds": 3}}}
    path = write_manifest(manifests, "hooks", manifest)
    name = f"hooks-{NODE}"
    await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    assert requests == [("/started", "kube-lifecycle/1.36")]

    removed_at = time.time()
    path.unlink()
    await wait_for(lambda: name not in (agent.pods() or {}), 30, "the pod gone", describe=agent.describe)
    term_at = int((data / "log").read_text().split()[1])
    assert term_at >= math.floor(removed_at) + 2, "the sleep hook held SIGTERM back for its 3 seconds"


async def test_termination_messages_from_the_file_and_from_the_log_on_error(agent, manifests):
    manifest = pod_manifest("lastwords", "printf 'bye from the file' > /dev/termination-log; exit 0",
                            restart_policy="Never")
    manifest["spec"]["containers"] += [
        {"name": "custom", "image": BUSYBOX, "terminationMessagePath": "/tmp/why",
         "command": ["sh", "-c", "echo custom-path > /tmp/why; exit 1"]},
        {"name": "fallback", "image": BUSYBOX, "terminationMessagePolicy": "FallbackToLogsOnError",
         "command": ["sh", "-c", "seq 1 100; echo failing; exit 2"]},
        {"name": "quiet", "image": BUSYBOX, "terminationMessagePolicy": "FallbackToLogsOnError",
         "command": ["sh", "-c", "echo all-good"]},
    ]
    write_manifest(manifests, "lastwords", manifest)
    name = f"lastwords-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Failed", 30, "Failed (every container exited)")
    terminated = {n: s["state"]["terminated"] for n, s in statuses(pod).items()}
    assert terminated["main"]["message"] == "bye from the file"
    assert terminated["custom"]["message"] == "custom-path\n"
    # The tail of the log: its last 80 lines.
    expected = "".join(f"{i}\n" for i in range(22, 101)) + "failing\n"
    assert terminated["fallback"]["message"] == expected
    assert "message" not in terminated["quiet"], "no fallback for a container that succeeded"


class _Health(health_pb2_grpc.HealthServicer):
    def __init__(self):
        self.status = health_pb2.HealthCheckResponse.SERVING
        self.asked: list[str] = []

    def Check(self, request, context):  # noqa: N802 (the generated API)
        self.asked.append(request.service)
        return health_pb2.HealthCheckResponse(status=self.status)


async def test_grpc_readiness_probe_follows_the_health_service(agent, manifests):
    # busybox cannot serve gRPC: the health server runs here, on the host, and the pod uses the
    # host network, so the agent's probe dials the pod's IP (the node's) and reaches it for real.
    health = _Health()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = free_port()
    server.add_insecure_port(f"0.0.0.0:{port}")
    server.start()
    try:
        manifest = pod_manifest("grpcready", "sleep 3600")
        manifest["spec"]["hostNetwork"] = True
        manifest["spec"]["containers"][0]["readinessProbe"] = {
            "grpc": {"port": port, "service": "payments"}, "periodSeconds": 1, "failureThreshold": 1}
        write_manifest(manifests, "grpcready", manifest)
        name = f"grpcready-{NODE}"
        await agent.wait_pod(name, lambda p: main_status(p)["ready"], 30, "ready while the service is SERVING")
        assert "payments" in health.asked
        health.status = health_pb2.HealthCheckResponse.NOT_SERVING
        await agent.wait_pod(name, lambda p: not main_status(p)["ready"], 15, "not ready once NOT_SERVING")
        health.status = health_pb2.HealthCheckResponse.SERVING
        await agent.wait_pod(name, lambda p: main_status(p)["ready"], 15, "ready again")
    finally:
        server.stop(0)


async def test_host_aliases_hostname_and_subdomain_in_the_managed_etc_hosts(agent, manifests):
    manifest = pod_manifest("aliases", "hostname; cat /etc/hosts; sleep 3600")
    manifest["spec"].update(hostname="web-0", subdomain="web",
                            hostAliases=[{"ip": "10.1.2.3", "hostnames": ["foo.local", "bar.local"]},
                                         {"ip": "10.1.2.4", "hostnames": ["baz"]}])
    write_manifest(manifests, "aliases", manifest)
    name = f"aliases-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    lines = await wait_lines(agent, name, pod, 12)
    ip = pod["status"]["podIP"]
    assert lines[0] == "web-0"
    assert lines[1] == "# Kubernetes-managed hosts file."
    assert "127.0.0.1\tlocalhost" in lines
    assert f"{ip}\tweb-0.web.default.svc.cluster.local\tweb-0" in lines
    assert lines[-3:] == ["# Entries added by HostAliases.", "10.1.2.3\tfoo.local\tbar.local", "10.1.2.4\tbaz"]
    hosts_file = agent.workdir / "root" / "pods" / pod["metadata"]["uid"] / "etc-hosts"
    assert hosts_file.read_text().splitlines() == lines[1:]


async def test_host_pid_ipc_and_network_share_the_nodes_namespaces_and_hosts_file(agent, manifests):
    manifest = pod_manifest("hostns", "readlink /proc/self/ns/pid; readlink /proc/self/ns/ipc; "
                                      "tr '\\0' ' ' < /proc/1/cmdline; echo; head -1 /etc/hosts; "
                                      "tail -1 /etc/hosts; sleep 3600")
    manifest["spec"].update(hostPID=True, hostIPC=True, hostNetwork=True,
                            hostAliases=[{"ip": "10.9.9.9", "hostnames": ["extra"]}])
    write_manifest(manifests, "hostns", manifest)
    name = f"hostns-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    lines = await wait_lines(agent, name, pod, 5)
    assert lines[0] == os.readlink("/proc/self/ns/pid")
    assert lines[1] == os.readlink("/proc/self/ns/ipc")
    assert lines[2].strip() == pathlib.Path("/proc/1/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    assert lines[3:5] == ["# Kubernetes-managed hosts file (host network).", "10.9.9.9\textra"]


async def test_a_pod_without_host_pid_sees_only_its_own_processes(agent, manifests):
    write_manifest(manifests, "ownpid", pod_manifest("ownpid", "readlink /proc/self/ns/pid; "
                                                               "tr '\\0' ' ' < /proc/1/cmdline; echo; sleep 3600"))
    name = f"ownpid-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    lines = await wait_lines(agent, name, pod, 2)
    assert lines[0] != os.readlink("/proc/self/ns/pid")
    assert lines[1].startswith("sh -c readlink")


async def test_share_process_namespace_lets_containers_see_each_other(agent, manifests):
    manifest = pod_manifest("sharedpid", "sleep 3600")
    manifest["spec"]["shareProcessNamespace"] = True
    manifest["spec"]["containers"].append(
        {"name": "peek", "image": BUSYBOX, "command": ["sh", "-c", "sleep 1; ps -o args; sleep 3600"]})
    write_manifest(manifests, "sharedpid", manifest)
    name = f"sharedpid-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    lines = await wait_for(lambda: "sleep 3600" in log_lines(agent, name, pod, "peek")
                           and log_lines(agent, name, pod, "peek"), 15, "ps output from peek",
                           describe=agent.describe)
    assert lines[1] == "/pause", "PID 1 of a shared namespace is the sandbox's pause"


async def test_safe_sysctls_are_set_in_the_pod_and_unsafe_ones_are_rejected(agent, manifests):
    manifest = pod_manifest("sysctl", "cat /proc/sys/net/ipv4/ip_local_port_range /proc/sys/kernel/shm_rmid_forced; "
                                      "sleep 3600")
    manifest["spec"]["securityContext"] = {"sysctls": [
        {"name": "net.ipv4.ip_local_port_range", "value": "20000 30000"},
        {"name": "kernel.shm_rmid_forced", "value": "1"}]}
    write_manifest(manifests, "sysctl", manifest)
    unsafe = pod_manifest("unsafe", "sleep 3600")
    unsafe["spec"]["securityContext"] = {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}
    write_manifest(manifests, "unsafe", unsafe)

    name = f"sysctl-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    assert (await wait_lines(agent, name, pod, 2))[:2] == ["20000\t30000", "1"]
    assert pathlib.Path("/proc/sys/kernel/shm_rmid_forced").read_text().strip() == "0", "the node keeps its own"
    rejected = await agent.wait_pod(f"unsafe-{NODE}", lambda p: phase(p) == "Failed", 20, "rejected")
    assert rejected["status"]["reason"] == "SysctlForbidden"
    assert rejected["status"]["message"] == 'Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted'


async def test_allowed_unsafe_sysctls_let_a_pod_set_them(cri, tmp_path, manifests):
    unsafe = pod_manifest("msgmax", "cat /proc/sys/kernel/msgmax; sleep 3600")
    unsafe["spec"]["securityContext"] = {"sysctls": [{"name": "kernel.msgmax", "value": "12345"}]}
    write_manifest(manifests, "msgmax", unsafe)
    agent = AgentProcess(tmp_path, manifests, "--allowed-unsafe-sysctls", "kernel.msg*").start()
    try:
        name = f"msgmax-{NODE}"
        pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
        assert (await wait_lines(agent, name, pod, 1))[0] == "12345"
    finally:
        agent.shutdown()


async def _memory_cgroup(cri, pod_name: str) -> str:
    """The memory cgroup of the pod's container, from /proc/<pid>/cgroup of its process."""
    (container,) = await containers_of(cri, pod_name)
    info = json.loads((await cri.container_status(container.id, verbose=True)).info["info"])
    lines = pathlib.Path(f"/proc/{info['pid']}/cgroup").read_text().splitlines()
    return next(line.split(":", 2)[2] for line in lines if line.split(":")[1] == "memory")


async def test_pod_cgroups_follow_the_kubelets_qos_layout_and_go_with_the_pod(agent, cri, manifests):
    pods = {
        "guaranteed": {"limits": {"memory": "48Mi", "cpu": "100m"}},
        "burstable": {"requests": {"memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "besteffort": {},
    }
    paths = {}
    for which, resources in pods.items():
        manifest = pod_manifest(which, "sleep 3600")
        manifest["spec"]["containers"][0]["resources"] = resources
        paths[which] = write_manifest(manifests, which, manifest)
    tiers = {"guaranteed": "/kubepods", "burstable": "/kubepods/burstable", "besteffort": "/kubepods/besteffort"}
    for which, tier in tiers.items():
        name = f"{which}-{NODE}"
        pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
        cgroup = await _memory_cgroup(cri, name)
        (container,) = await containers_of(cri, name)
        assert cgroup == f"{tier}/pod{pod['metadata']['uid']}/{container.id}"
        limit = int((pathlib.Path("/sys/fs/cgroup/memory") / cgroup.lstrip("/") / "memory.limit_in_bytes").read_text())
        wanted = {"guaranteed": 48 * 2**20, "burstable": 64 * 2**20}.get(which)
        if wanted:
            assert limit == wanted
        else:
            assert limit > 2**40, "no limit for a BestEffort container"
        # The pod's own cgroup carries the pod-level limits.
        pod_dir = cgroup.lstrip("/").rsplit("/", 1)[0]
        pod_memory = int((pathlib.Path("/sys/fs/cgroup/memory") / pod_dir / "memory.limit_in_bytes").read_text())
        assert (pod_memory == wanted) if wanted else pod_memory > 2**40
        cpu = pathlib.Path("/sys/fs/cgroup/cpu") / pod_dir
        shares, quota = int((cpu / "cpu.shares").read_text()), int((cpu / "cpu.cfs_quota_us").read_text())
        assert (shares, quota) == ((102, 10000) if which == "guaranteed" else (2, -1))

    pod_cgroup = pathlib.Path("/sys/fs/cgroup/memory") / cgroup.lstrip("/").rsplit("/", 1)[0]
    assert pod_cgroup.is_dir()
    paths["besteffort"].unlink()
    await wait_for(lambda: not pod_cgroup.exists(), 30, "the pod's cgroup removed with it", describe=agent.describe)
