"""kubectl debug --target on a real control plane and containerd: the debugger sees the target's
processes; without --target (and without shareProcessNamespace) it sees only its own."""

from __future__ import annotations

from typing import Any

from tests.cluster.conftest import apply, kubectl, kubectl_json, running_pods
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, NODE, pod_manifest

# A sleep no other process on the node runs: the debugger's view of it is the target's own.
TARGET_SLEEP = "sleep 27182818"
LIST_PROCESSES = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"


def debugger_finished(namespace: str, name: str) -> dict[str, Any] | None:
    pod = kubectl_json("get", "pod", "target", "-n", namespace)
    for status in pod["status"].get("ephemeralContainerStatuses") or []:
        if status["name"] == name and "terminated" in status.get("state", {}):
            return status
    return None


async def debug(namespace: str, name: str, *flags: str) -> str:
    """What a debugger container listing every process it can see printed."""
    kubectl("debug", "pod/target", "-n", namespace, f"--image={BUSYBOX}", "--profile=general", f"--container={name}",
            *flags, "--", "sh", "-c", LIST_PROCESSES)
    status = await wait_for(lambda: debugger_finished(namespace, name), 60, f"the debugger {name} to finish")
    assert status["state"]["terminated"]["exitCode"] == 0, status
    return kubectl("logs", "target", "-n", namespace, "-c", name).stdout


async def test_a_debugger_with_a_target_sees_the_targets_processes_and_one_without_does_not(node_agent, namespace):
    manifest = pod_manifest("target", TARGET_SLEEP.split(), grace=1)
    manifest["metadata"]["namespace"] = namespace
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    apply(manifest)
    await wait_for(lambda: running_pods(namespace, 1), 60, "the pod Running", describe=node_agent.describe)

    targeted = await debug(namespace, "targeted", "--target=main")
    assert TARGET_SLEEP in [line.strip() for line in targeted.splitlines()]
    alone = await debug(namespace, "alone")
    assert any(line.startswith("sh -c for f in /proc") for line in alone.splitlines())  # it sees itself
    assert "27182818" not in alone  # and not the target
    (main,) = kubectl_json("get", "pod", "target", "-n", namespace)["status"]["containerStatuses"]
    assert main["restartCount"] == 0 and "running" in main["state"]
