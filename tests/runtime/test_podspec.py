"""The PodSpec fields a real workload uses, on the real containerd: env, resources, QoS,
securityContext, DNS."""

from __future__ import annotations

import json
import pathlib

from tests.helpers import wait_for
from tests.runtime.conftest import (AgentProcess, NODE, containers_of, main_status, phase, pod_manifest,
                                    write_manifest)


def log_lines(agent, name: str, pod) -> list[str]:
    path = agent.logs_dir / f"default_{name}_{pod['metadata']['uid']}" / "main" / "0.log"
    return [line.split(" ", 3)[3] for line in path.read_text().splitlines()] if path.exists() else []


async def test_env_from_fields_and_resources_with_var_expansion(agent, manifests):
    manifest = pod_manifest("envy", 'echo "name=$POD_NAME ns=$POD_NS node=$NODE ip=$POD_IP mem=$MEM greet=$GREETING"; '
                                    'echo "args:$0"; sleep 3600', args=["$(GREETING)-arg"])
    manifest["spec"]["containers"][0]["resources"] = {"limits": {"memory": "64Mi"}}
    manifest["spec"]["containers"][0]["env"] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "GREETING", "value": "hello-$(POD_NAME)"},
    ]
    write_manifest(manifests, "envy", manifest)
    name = f"envy-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    lines = await wait_for(lambda: len(log_lines(agent, name, pod)) >= 2 and log_lines(agent, name, pod), 10,
                           "the env line in the log")
    ip = pod["status"]["podIP"]
    assert lines[0] == f"name={name} ns=default node={NODE} ip={ip} mem=64 greet=hello-{name}"
    assert lines[1] == f"args:hello-{name}-arg"
    assert pod["status"]["qosClass"] == "Burstable"


async def test_memory_limit_is_in_the_cgroup_and_an_oom_kill_says_oomkilled(agent, cri, manifests):
    manifest = pod_manifest("hog", "sleep 2; head -c 200m /dev/zero | tail > /dev/null", restart_policy="Never")
    manifest["spec"]["containers"][0]["resources"] = {"limits": {"memory": "32Mi", "cpu": "500m"},
                                                      "requests": {"memory": "32Mi", "cpu": "500m"}}
    write_manifest(manifests, "hog", manifest)
    name = f"hog-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    assert pod["status"]["qosClass"] == "Guaranteed"
    (container,) = await containers_of(cri, name)
    info = json.loads((await cri.container_status(container.id, verbose=True)).info["info"])
    cgroup = info["runtimeSpec"]["linux"]["cgroupsPath"].lstrip("/")
    limit = pathlib.Path("/sys/fs/cgroup/memory") / cgroup / "memory.limit_in_bytes"
    assert int(limit.read_text()) == 32 * 2**20
    memsw = limit.with_name("memory.memsw.limit_in_bytes")
    if memsw.exists():  # swap accounting on: NoSwap, memory+swap is the memory limit (no swap beyond it)
        assert int(memsw.read_text()) == 32 * 2**20
    quota = pathlib.Path("/sys/fs/cgroup/cpu") / cgroup / "cpu.cfs_quota_us"
    assert int(quota.read_text()) == 50000

    pod = await agent.wait_pod(name, lambda p: phase(p) == "Failed", 30, "Failed after the OOM kill")
    terminated = main_status(pod)["state"]["terminated"]
    assert terminated["reason"] == "OOMKilled" and terminated["exitCode"] == 137


async def test_run_as_non_root_on_a_root_image_is_a_create_container_config_error(agent, manifests):
    manifest = pod_manifest("rooty", "sleep 3600")
    manifest["spec"]["securityContext"] = {"runAsNonRoot": True}
    write_manifest(manifests, "rooty", manifest)
    pod = await agent.wait_pod(f"rooty-{NODE}", lambda p: "waiting" in main_status(p)["state"]
                               and main_status(p)["state"]["waiting"]["reason"] == "CreateContainerConfigError",
                               30, "waiting CreateContainerConfigError")
    assert "runAsNonRoot and image will run as root" in main_status(pod)["state"]["waiting"]["message"]


async def test_run_as_user_and_read_only_root_filesystem_apply(agent, manifests):
    manifest = pod_manifest("nobody", "id -u; id -g; touch /x 2>/dev/null && echo writable || echo read-only; "
                                      "sleep 3600")
    manifest["spec"]["containers"][0]["securityContext"] = {"runAsUser": 65534, "runAsGroup": 65534,
                                                            "readOnlyRootFilesystem": True}
    write_manifest(manifests, "nobody", manifest)
    name = f"nobody-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    lines = await wait_for(lambda: len(log_lines(agent, name, pod)) >= 3 and log_lines(agent, name, pod), 10,
                           "three lines of output")
    assert lines[:3] == ["65534", "65534", "read-only"]


async def test_cluster_first_dns_writes_the_cluster_resolver(cri, tmp_path, manifests):
    write_manifest(manifests, "dns", pod_manifest("dns", "cat /etc/resolv.conf; sleep 3600"))
    agent = AgentProcess(tmp_path, manifests, "--cluster-dns", "10.96.0.10", "--cluster-domain", "cluster.local")
    agent.start()
    try:
        name = f"dns-{NODE}"
        pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
        lines = await wait_for(lambda: any(line.startswith("options") for line in log_lines(agent, name, pod))
                               and log_lines(agent, name, pod), 10, "resolv.conf in the log")
        assert "nameserver 10.96.0.10" in lines
        assert "search default.svc.cluster.local svc.cluster.local cluster.local" in " ".join(lines)
        assert "options ndots:5" in lines
    finally:
        agent.shutdown()


async def test_init_containers_run_in_order_before_the_app_and_a_sidecar_keeps_running(agent, cri, manifests):
    manifest = pod_manifest("inits", "sleep 3600", restart_policy="OnFailure")
    manifest["spec"]["initContainers"] = [
        {"name": "first", "image": "docker.io/library/busybox:1.36", "command": ["sh", "-c", "echo first; sleep 1"]},
        {"name": "helper", "image": "docker.io/library/busybox:1.36", "restartPolicy": "Always",
         "command": ["sh", "-c", "echo sidecar-up; sleep 3600"]},
        {"name": "flaky", "image": "docker.io/library/busybox:1.36",
         "command": ["sh", "-c", "echo flaky; exit 1"]},
    ]
    write_manifest(manifests, "inits", manifest)
    name = f"inits-{NODE}"

    def init(pod, which):
        return next(s for s in pod["status"].get("initContainerStatuses", []) if s["name"] == which)

    pod = await agent.wait_pod(name, lambda p: init(p, "flaky")["restartCount"] >= 1, 40,
                               "the failing init container retried")
    assert pod["status"]["phase"] == "Pending"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Initialized"] == "False"
    assert init(pod, "first")["state"]["terminated"]["exitCode"] == 0
    assert "running" in init(pod, "helper")["state"], "the sidecar stays up while a later init retries"
    assert main_status(pod)["state"]["waiting"]["reason"] == "PodInitializing"
    assert not [c for c in await containers_of(cri, name) if c.metadata.name == "main"]

    fixed = json.loads(json.dumps(manifest))
    fixed["spec"]["initContainers"][2]["command"] = ["sh", "-c", "echo fixed"]
    write_manifest(manifests, "inits", fixed)  # a new pod (new UID): now every init succeeds
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running" and init(p, "flaky")["restartCount"] == 0
                               and "running" in main_status(p)["state"], 40, "initialized and Running")
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Initialized"] == "True"
    assert "running" in init(pod, "helper")["state"]


async def test_failed_init_container_with_restart_policy_never_fails_the_pod(agent, manifests):
    manifest = pod_manifest("initfail", "sleep 3600", restart_policy="Never")
    manifest["spec"]["initContainers"] = [
        {"name": "setup", "image": "docker.io/library/busybox:1.36", "command": ["sh", "-c", "exit 7"]}]
    write_manifest(manifests, "initfail", manifest)
    pod = await agent.wait_pod(f"initfail-{NODE}", lambda p: phase(p) == "Failed", 30, "phase Failed")
    (setup,) = pod["status"]["initContainerStatuses"]
    assert setup["state"]["terminated"]["exitCode"] == 7
    assert "running" not in main_status(pod)["state"]


async def test_http_liveness_probe_that_starts_failing_restarts_the_container(agent, manifests):
    # httpd serves /healthz for 3 s, then the file goes away and the probe gets 404s.
    manifest = pod_manifest("alive", "mkdir -p /www; echo ok > /www/healthz; (sleep 3; rm /www/healthz) & "
                                     "exec httpd -f -p 8080 -h /www", grace=1)
    manifest["spec"]["containers"][0]["ports"] = [{"name": "web", "containerPort": 8080}]
    manifest["spec"]["containers"][0]["livenessProbe"] = {
        "httpGet": {"path": "/healthz", "port": "web"}, "periodSeconds": 1, "failureThreshold": 2}
    write_manifest(manifests, "alive", manifest)
    name = f"alive-{NODE}"
    pod = await agent.wait_pod(name, lambda p: main_status(p)["ready"], 30, "Running and ready")
    assert main_status(pod)["restartCount"] == 0
    pod = await agent.wait_pod(name, lambda p: main_status(p)["restartCount"] >= 1, 30,
                               "a restart after the liveness probe failed")
    assert main_status(pod)["lastState"]["terminated"]["exitCode"] in (137, 143)  # killed, not crashed
    assert "Container failed liveness probe, will be restarted" in agent.log()


async def test_exec_readiness_probe_gates_ready(agent, manifests):
    manifest = pod_manifest("slowready", "sleep 3; touch /tmp/ready; sleep 3600")
    manifest["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}
    write_manifest(manifests, "slowready", manifest)
    name = f"slowready-{NODE}"

    def conditions(p):
        return {c["type"]: c["status"] for c in p["status"]["conditions"]}
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    assert not main_status(pod)["ready"] and conditions(pod)["Ready"] == "False"
    pod = await agent.wait_pod(name, lambda p: main_status(p)["ready"], 20, "ready once /tmp/ready exists")
    assert conditions(pod)["Ready"] == "True" and main_status(pod)["restartCount"] == 0


async def test_empty_dir_is_shared_by_init_and_app_containers_and_removed_with_the_pod(agent, manifests, tmp_path):
    host_dir = tmp_path / "host-data"
    host_dir.mkdir()
    (host_dir / "motd").write_text("from-the-host\n")
    manifest = pod_manifest("vols", "cat /work/note /host/motd /scratch/t; sleep 3600", grace=1)
    manifest["spec"]["volumes"] = [
        {"name": "work", "emptyDir": {}},
        {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
        {"name": "host", "hostPath": {"path": str(host_dir), "type": "Directory"}},
    ]
    manifest["spec"]["initContainers"] = [{
        "name": "prepare", "image": "docker.io/library/busybox:1.36",
        "command": ["sh", "-c", "echo prepared-by-init > /work/note; echo in-tmpfs > /scratch/t"],
        "volumeMounts": [{"name": "work", "mountPath": "/work"}, {"name": "scratch", "mountPath": "/scratch"}]}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "work", "mountPath": "/work"}, {"name": "scratch", "mountPath": "/scratch"},
        {"name": "host", "mountPath": "/host", "readOnly": True}]
    path = write_manifest(manifests, "vols", manifest)
    name = f"vols-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    lines = await wait_for(lambda: len(log_lines(agent, name, pod)) >= 3 and log_lines(agent, name, pod), 10,
                           "the volume contents in the log")
    assert lines[:3] == ["prepared-by-init", "from-the-host", "in-tmpfs"]
    pod_dir = agent.workdir / "root" / "pods" / pod["metadata"]["uid"]
    scratch = pod_dir / "volumes" / "kubernetes.io~empty-dir" / "scratch"
    assert scratch.is_mount()

    path.unlink()
    await wait_for(lambda: not pod_dir.exists(), 20, "the pod's volume directory removed", describe=agent.describe)
    assert (host_dir / "motd").read_text() == "from-the-host\n", "hostPath data must survive the pod"


async def test_files_in_an_empty_dir_belong_to_the_pods_fs_group(agent, manifests):
    manifest = pod_manifest("fsgroup", "touch /data/f; stat -c '%u:%g' /data/f; sleep 3600", grace=1)
    manifest["spec"]["securityContext"] = {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000}
    manifest["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    write_manifest(manifests, "fsgroup", manifest)
    name = f"fsgroup-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    lines = await wait_for(lambda: log_lines(agent, name, pod), 10, "the file's owner in the log",
                           describe=agent.describe)
    assert lines[0] == "1000:2000"  # made by the container's user, in the pod's fsGroup (setgid)


async def test_empty_dir_modes_are_the_kubelets_on_disk_and_in_memory(agent, manifests):
    script = "stat -c '%a' /disk /memory; sleep 3600"
    manifest = pod_manifest("modes", script, grace=1)
    manifest["spec"]["securityContext"] = {"fsGroup": 123}
    manifest["spec"]["volumes"] = [{"name": "disk", "emptyDir": {}},
                                   {"name": "memory", "emptyDir": {"medium": "Memory"}}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "disk", "mountPath": "/disk"},
                                                         {"name": "memory", "mountPath": "/memory"}]
    write_manifest(manifests, "modes", manifest)
    name = f"modes-{NODE}"
    pod = await agent.wait_pod(name, lambda p: phase(p) == "Running", 30, "Running")
    lines = await wait_for(lambda: len(log_lines(agent, name, pod)) >= 2 and log_lines(agent, name, pod), 10,
                           "the modes in the log", describe=agent.describe)
    # 0777 on disk, tmpfs' own 1777 in memory; the fsGroup adds setgid (and group rwx).
    assert lines[:2] == ["2777", "3777"]
