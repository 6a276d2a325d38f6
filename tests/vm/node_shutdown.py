"""Graceful node shutdown on a real systemd machine: one Debian 12 VM provisioned by
vagrant/provision/node.sh, pykubelet under kubelet.service running two static pods (a regular one
and a system-node-critical one) with shutdownGracePeriod 20s, shutdownGracePeriodCriticalPods 10s.
`systemctl poweroff` in the VM; logind waits on the agent's delay lock while it stops the regular
pod, then the critical one, each within its 10 s, and then lets the machine go. The VM is booted
again from the same disk and the previous boot's journal (persistent), the pods' log files and
the agent's graceful_node_shutdown_state tell what happened. Then swap on that machine:
failSwapOn (the default) stops the agent with the kubelet's error; with failSwapOn: false the
containers get memory.swap.max 0 (NoSwap).

The agent runs standalone (no kubeadm init: it would cost minutes under emulation and add
nothing here), so the story is read from the journal, not from the apiserver.

Not collected by `make test` (the file name is not test_*.py): provisioning and two boots under
emulation take 15-20 minutes. Run: pytest tests/vm/node_shutdown.py
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Iterator

import pytest

from pykubelet.node import shutdown_state
from tests.helpers import wait_for
from tests.vm.conftest import boot, journal, provision
from tests.vm.machine import Machine

NODE = "pkl-shutdown"
GRACE, CRITICAL = 20, 10
SLACK = 3.0  # the manager checks its pods every 0.2 s; journald stamps what it is handed
CONFIG = f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
staticPodPath: /etc/kubernetes/manifests
shutdownGracePeriod: {GRACE}s
shutdownGracePeriodCriticalPods: {CRITICAL}s
"""
# No kubeconfig: the agent runs standalone, on the same config file kubeadm's drop-in passes.
DROP_IN = "[Service]\nExecStart=\nExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml\n"
# SIGTERM is answered at once, and said in the pod's log: under emulation stopping a pod (its
# container, then its sandbox) takes 5-10 s already, and each group has 10 s.
COMMAND = "trap 'echo got TERM; exit 0' TERM; while true; do sleep 1 & wait $!; done"


def static_pod(name: str, critical: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "hostNetwork": True, "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "main", "image": "docker.io/library/busybox:1.36",
                        "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", COMMAND]}]}
    if critical:  # as kubeadm writes its static pods: the class and its priority
        spec.update(priorityClassName="system-node-critical", priority=2000001000)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "kube-system"},
            "spec": spec}


@pytest.fixture(scope="module")
def node(vm_bed, private_ports) -> Iterator[Machine]:
    machine = boot(vm_bed, NODE, 13, *private_ports)
    try:
        provision(machine, "node.sh")
        yield machine
    finally:
        machine.down()


def write(machine: Machine, path: str, text: str) -> None:
    """The file as given: base64 through the shell, where quoting would mangle newlines."""
    encoded = base64.b64encode(text.encode()).decode()
    machine.ssh(f"mkdir -p $(dirname {path}) && echo {encoded} | base64 -d > {path}")


def running_containers(machine: Machine) -> int:
    out = machine.ssh("ctr -n k8s.io tasks ls", check=False, timeout=60).stdout
    return sum("RUNNING" in line for line in out.splitlines()[1:])


def previous_boot(machine: Machine) -> list[tuple[float, str]]:
    """(seconds, message) of the agent's lines in the previous boot's journal."""
    out = machine.ssh("journalctl -b -1 -u kubelet -o json --output-fields=MESSAGE --no-pager", timeout=120).stdout
    lines = []
    for raw in out.splitlines():
        entry = json.loads(raw)
        message = entry.get("MESSAGE")
        if isinstance(message, str):
            lines.append((int(entry["__REALTIME_TIMESTAMP"]) / 1e6, message))
    return lines


def story(lines: list[tuple[float, str]]) -> str:
    """The agent's lines from the shutdown on, each with its second since the shutdown began."""
    began = next((t for t, m in lines if "detected new shutdown event" in m), lines[0][0] if lines else 0.0)
    return "\n".join(f"{t - began:+8.2f} {m}" for t, m in lines if t >= began - 1)


def first(lines: list[tuple[float, str]], *needles: str) -> float:
    found = [t for t, message in lines if all(n in message for n in needles)]
    if not found:
        pytest.fail(f"no line with {needles} in the agent's journal:\n{story(lines)}", pytrace=False)
    return found[0]


async def test_poweroff_waits_for_regular_then_critical_pods_each_within_its_budget(node: Machine):
    # a persistent journal, so the next boot can read this one's
    node.ssh("mkdir -p /var/log/journal && systemd-tmpfiles --create --prefix /var/log/journal && "
             "journalctl --flush")
    write(node, "/var/lib/kubelet/config.yaml", CONFIG)
    write(node, "/etc/systemd/system/kubelet.service.d/20-standalone.conf", DROP_IN)
    for name, critical in (("regular", False), ("critical", True)):
        write(node, f"/etc/kubernetes/manifests/{name}.json", json.dumps(static_pod(name, critical)))
    node.ssh("systemctl daemon-reload && systemctl restart kubelet", timeout=400)
    await wait_for(lambda: running_containers(node) >= 4, 300, "both pods running (sandboxes and containers)",
                   interval=5, describe=lambda: journal(node))
    # logind allows the whole budget (Debian's default is 5 s) and holds the agent's delay lock
    facts = node.ssh("cat /etc/systemd/logind.conf.d/99-kubelet.conf; busctl get-property org.freedesktop.login1 "
                     "/org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec; "
                     "systemd-inhibit --list --no-pager").stdout
    assert f"InhibitDelayMaxSec={GRACE}" in facts and f"t {GRACE * 1_000_000}" in facts, facts
    assert re.search(r"kubelet\s.*shutdown\s.*delay", facts), facts

    node.ssh("systemctl disable kubelet")  # the next boot leaves the pods' logs as this one left them
    node.poweroff(timeout=300)
    node.start()
    node.wait_for_ssh()
    lines = previous_boot(node)
    began = first(lines, "Shutdown manager detected new shutdown event", 'event="shutdown"')
    regular_kill = first(lines, "killing pod with gracePeriod", "regular-", f"gracePeriod={GRACE - CRITICAL}")
    regular_done = first(lines, "finished killing pod", "regular-")
    critical_kill = first(lines, "killing pod with gracePeriod", "critical-", f"gracePeriod={CRITICAL}")
    critical_done = first(lines, "finished killing pod", "critical-")
    released = first(lines, "completed processing shutdown event")
    print(story(lines))
    # in order: the regular pod, then the critical one, then the lock released
    assert began <= regular_kill <= regular_done <= critical_kill <= critical_done <= released, story(lines)
    # each within its group's budget, the whole within shutdownGracePeriod
    assert regular_done - began <= GRACE - CRITICAL + SLACK
    assert critical_done - regular_done <= CRITICAL + SLACK
    assert released - began <= GRACE + SLACK
    # each container got SIGTERM and answered it: stopped gracefully, not killed
    logs = node.ssh("cat /var/log/pods/kube-system_regular-*/main/*.log /var/log/pods/kube-system_critical-*/main/"
                    "*.log").stdout
    assert logs.count("got TERM") == 2, logs
    # the shutdown's record, as the kubelet keeps it for the next start's metrics: its start and end
    record = shutdown_state.decode(node.ssh(f"cat /var/lib/kubelet/{shutdown_state.FILE}").stdout.encode(),
                                   shutdown_state.FILE)
    assert record.start is not None and record.end is not None, record
    assert abs(record.start - began) <= SLACK and abs(record.end - released) <= SLACK, (record, began, released)


def container_ids(machine: Machine) -> list[str]:
    """The app containers containerd runs for the pods (not their sandboxes)."""
    out = machine.ssh("ctr -n k8s.io tasks ls", timeout=60).stdout.splitlines()[1:]
    running = {line.split()[0] for line in out if "RUNNING" in line}
    kinds = machine.ssh("ctr -n k8s.io containers ls -q 'labels.\"io.cri-containerd.kind\"==container'",
                        timeout=60).stdout.split()
    return sorted(running & set(kinds))


async def test_with_swap_on_fail_swap_on_stops_the_start_and_without_it_containers_get_no_swap(node: Machine):
    """After the shutdown test: the same VM, booted again, its kubelet disabled."""
    node.ssh("fallocate -l 128M /swapfile && chmod 600 /swapfile && mkswap -q /swapfile && swapon /swapfile && "
             "test $(wc -l < /proc/swaps) -gt 1")
    started = node.ssh("systemctl start kubelet", timeout=400, check=False)
    assert started.returncode != 0  # failSwapOn defaults to true: the agent exits before READY=1
    logs = node.ssh("systemctl stop kubelet; journalctl -b -u kubelet --no-pager -o cat", timeout=200).stdout
    assert ("failed to run Kubelet: running with swap on is not supported, please disable swap or set "
            "--fail-swap-on flag to false") in logs, logs[-3000:]

    write(node, "/var/lib/kubelet/config.yaml", CONFIG + "failSwapOn: false\n")
    node.ssh("systemctl start kubelet", timeout=400)
    await wait_for(lambda: len(container_ids(node)) >= 2, 300, "both pods' containers running again", interval=5,
                   describe=lambda: journal(node))
    # the kernel limits swap per cgroup (the agent's own has memory.swap.max): NoSwap, the default,
    # gives every container memory.swap.max 0
    assert node.ssh("cat /sys/fs/cgroup/system.slice/kubelet.service/memory.swap.max").stdout.strip() == "max"
    limits = [node.ssh(f"cat /sys/fs/cgroup/kubepods.slice/*/*/cri-containerd-{cid}.scope/memory.swap.max").stdout
              .strip() for cid in container_ids(node)]
    assert limits == ["0"] * len(limits) and len(limits) >= 2, limits
