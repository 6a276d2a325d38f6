"""A static pod's life on the real containerd: runs, logs, is replaced, is removed."""

from __future__ import annotations

import asyncio
import os
import subprocess

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels
from tests.helpers import wait_for
from tests.runtime.conftest import (NODE, containers_of, main_status, phase, pod_manifest, remove_test_pods,
                                    sandboxes_of, write_manifest)


def running(pod) -> bool:
    return phase(pod) == "Running" and "running" in main_status(pod)["state"]


async def test_static_pod_runs_with_kubelet_labels_and_cri_log(agent, cri, manifests):
    write_manifest(manifests, "echo", pod_manifest("echo", "echo hello-from-pykubelet; sleep 3600"))
    name = f"echo-{NODE}"
    pod = await agent.wait_pod(name, running, 30, "Running")

    uid = pod["metadata"]["uid"]
    assert pod["metadata"]["namespace"] == "default"
    assert pod["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
    assert pod["status"]["podIP"].startswith("10.88.")
    (sandbox,) = await sandboxes_of(cri, name)
    assert sandbox.state == api.SANDBOX_READY
    assert sandbox.labels[labels.POD_UID] == uid and sandbox.labels[labels.POD_NAMESPACE] == "default"
    (container,) = await containers_of(cri, name)
    assert container.state == api.CONTAINER_RUNNING
    assert container.labels[labels.CONTAINER_NAME] == "main"
    assert main_status(pod)["containerID"] == f"containerd://{container.id}"

    log_file = agent.logs_dir / f"default_{name}_{uid}" / "main" / "0.log"
    lines = await wait_for(lambda: log_file.exists() and log_file.read_text().splitlines(), 10,
                           f"a line in {log_file}")
    stamp, stream, tag, text = lines[0].split(" ", 3)
    assert (stream, tag, text) == ("stdout", "F", "hello-from-pykubelet")
    assert stamp.endswith("Z") or "+" in stamp  # RFC 3339 time, as the CRI log format has it


async def test_edited_manifest_replaces_the_pod(agent, cri, manifests):
    write_manifest(manifests, "edit", pod_manifest("edit", "echo version-1; sleep 3600"))
    name = f"edit-{NODE}"
    first = await agent.wait_pod(name, running, 30, "Running")
    (old_container,) = await containers_of(cri, name)

    write_manifest(manifests, "edit", pod_manifest("edit", "echo version-2; sleep 3600"))
    second = await agent.wait_pod(name, lambda p: p["metadata"]["uid"] != first["metadata"]["uid"] and running(p),
                                  30, "replaced by the edited manifest and Running")

    async def only_new_left():
        left = await containers_of(cri, name)
        return len(left) == 1 and left[0].id != old_container.id and len(await sandboxes_of(cri, name)) == 1
    await wait_for(only_new_left, 20, "the old pod's container and sandbox to be removed", describe=agent.describe)
    uid = second["metadata"]["uid"]
    log_file = agent.logs_dir / f"default_{name}_{uid}" / "main" / "0.log"
    await wait_for(lambda: log_file.exists() and "version-2" in log_file.read_text(), 10, "version-2 in the new log")
    assert not (agent.logs_dir / f"default_{name}_{first['metadata']['uid']}").exists()


async def test_removed_manifest_leaves_nothing_behind(agent, cri, manifests):
    path = write_manifest(manifests, "gone", pod_manifest("gone", "sleep 3600", grace=1))
    name = f"gone-{NODE}"
    pod = await agent.wait_pod(name, running, 30, "Running")
    log_dir = agent.logs_dir / f"default_{name}_{pod['metadata']['uid']}"
    assert log_dir.is_dir()

    os.remove(path)

    async def nothing_left():
        return not await containers_of(cri, name) and not await sandboxes_of(cri, name) and not log_dir.exists()
    await wait_for(nothing_left, 20, "no container, sandbox or log directory left", describe=agent.describe)
    await wait_for(lambda: (pods := agent.pods()) is not None and name not in pods, 5, "the pod to leave /pods",
                   describe=agent.describe)


async def test_grace_period_is_honoured_then_the_container_is_killed(agent, cri, manifests):
    # The container ignores SIGTERM: it must be killed once its 2 s grace period is over.
    path = write_manifest(manifests, "stubborn", pod_manifest(
        "stubborn", "trap 'echo got TERM' TERM; while true; do sleep 0.2; done", grace=2))
    name = f"stubborn-{NODE}"
    await agent.wait_pod(name, running, 30, "Running")
    loop_time = asyncio.get_running_loop().time
    start = loop_time()
    os.remove(path)

    async def gone():
        return not await containers_of(cri, name) and not await sandboxes_of(cri, name)
    await wait_for(gone, 20, "the stubborn pod to be removed", describe=agent.describe)
    took = loop_time() - start
    assert took >= 2.0, f"removed after {took:.2f}s: the 2 s grace period was not honoured"
    assert took < 10.0, f"removal took {took:.2f}s: SIGKILL did not follow the grace period"


async def test_host_port_is_mapped_through_cri(agent, cri, manifests):
    write_manifest(manifests, "hostport", pod_manifest(
        "hostport", "sleep 3600", ports=[{"containerPort": 80, "hostPort": 18080}]))
    name = f"hostport-{NODE}"
    await agent.wait_pod(name, running, 30, "Running")
    rules = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=True).stdout
    assert "--dport 18080" in rules, "portmap did not install a DNAT rule for hostPort 18080"


def nat_rules() -> str:
    return subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=True).stdout


async def test_host_port_rules_of_a_pod_removed_while_the_agent_was_down_go_with_the_next_agent(
        agent, cri, manifests):
    write_manifest(manifests, "hostport", pod_manifest(
        "hostport", "sleep 3600", ports=[{"containerPort": 80, "hostPort": 18081}]))
    await agent.wait_pod(f"hostport-{NODE}", running, 30, "Running")
    agent.shutdown()
    os.remove(manifests / "hostport.yaml")
    await remove_test_pods(cri)  # gone while no agent ran: its CNI DEL could not reach one
    assert "--dport 18081" in nat_rules()

    agent.start()

    await wait_for(lambda: "--dport 18081" not in nat_rules(), 30,
                   "the next agent to remove the hostPort rules of the pod that is gone", describe=agent.describe)
