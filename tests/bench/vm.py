"""A kubeadm worker under systemd: boot → Ready and `systemctl restart kubelet` → Ready, pykubelet
vs the real kubelet, in the same Debian 12 VM image, same run, same cluster.

    python -m tests.bench.vm [--rounds 2]

The cluster of `make vm-cluster-test` (tests/vm/kubeadm_cluster.py: two qemu VMs, kubeadm init
and join with pykubelet). Then, for each round and each kubelet (alternating, so drift hits
both), on the worker:
- restart → Ready: `systemctl restart kubelet` issued until the Node is Ready with a heartbeat
  from after the restart (the new process's first status); also until `systemctl restart`
  returned (Type=notify: both kubelets send READY=1 once they serve);
- boot → Ready: `systemctl poweroff`, then qemu started again on the same disk, until Ready
  with a new heartbeat.
The kubelet is switched by pointing /usr/bin/kubelet at pykubelet's venv or at the real
kubelet v1.36.3 (copied from the bundle), the unit and kubeadm's files unchanged. The Node is
read from the host through the apiserver's forwarded port every 0.5 s.

The VMs emulate their CPUs (TCG, ~19x slower than this host) and share its 2 cores: the
numbers are noisy and say how the two kubelets compare on a slow machine, not what either takes
on real hardware.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tests.bench.startup import machine as machine_details
from tests.vm import bundle as bundles
from tests.vm.conftest import image, mount_bundle
from tests.vm.kubeadm_cluster import Cluster, up
from tests.vm.machine import STATE, Machine, free_port, private_network, remove_state

KUBECTL = bundles.K8S_BIN / "kubectl"
KUBELETS = {"pykubelet": "/opt/pykubelet/venv/bin/pykubelet", "kubelet": "/usr/local/bin/kubelet-real"}


class HostView:
    """The worker's Node, read from the host through the forwarded apiserver port."""

    def __init__(self, cluster: Cluster, api_port: int, workdir: Path):
        self.node = cluster.worker.name
        admin = cluster.cp.ssh("cat /etc/kubernetes/admin.conf").stdout
        self.kubeconfig = workdir / "admin.conf"
        self.kubeconfig.write_text(admin)
        for args in (["set-cluster", "kubernetes", f"--server=https://127.0.0.1:{api_port}",
                      "--tls-server-name=kubernetes"],):
            subprocess.run([str(KUBECTL), "--kubeconfig", str(self.kubeconfig), "config", *args], check=True,
                           capture_output=True)

    def ready(self) -> tuple[bool, str]:
        """(Ready is True, its lastHeartbeatTime)."""
        out = subprocess.run([str(KUBECTL), "--kubeconfig", str(self.kubeconfig), "--request-timeout=5s", "get",
                              "node", self.node, "-o", "json"], capture_output=True, text=True)
        if out.returncode != 0:
            return False, ""
        for c in json.loads(out.stdout)["status"].get("conditions") or []:
            if c["type"] == "Ready":
                return c["status"] == "True", c.get("lastHeartbeatTime", "")
        return False, ""

    def wait_new_ready(self, old_heartbeat: str, started: float, timeout: float = 900) -> float:
        """Seconds from `started` (monotonic) until Ready with a heartbeat other than `old_heartbeat`."""
        while time.monotonic() - started < timeout:
            ready, beat = self.ready()
            if ready and beat != old_heartbeat:
                return time.monotonic() - started
            time.sleep(0.5)
        raise RuntimeError(f"{self.node} not Ready again after {timeout:.0f}s")


def switch(worker: Machine, view: HostView, kubelet: str) -> None:
    worker.ssh(f"ln -sfn {KUBELETS[kubelet]} /usr/bin/kubelet && systemctl restart kubelet", timeout=600)
    view.wait_new_ready("", time.monotonic())  # Ready, whoever's heartbeat


def measure_restart(worker: Machine, view: HostView) -> tuple[float, float]:
    _, beat = view.ready()
    started = time.monotonic()
    worker.ssh("systemctl restart kubelet", timeout=600)
    returned = time.monotonic() - started
    return view.wait_new_ready(beat, started), returned


def measure_boot(worker: Machine, view: HostView) -> float:
    worker.poweroff()
    # the last heartbeat of the machine that went down (read before the poweroff, a status the
    # stopping kubelet posted on its way down counted as the new boot's: 0.6 s "boot → Ready")
    _, beat = view.ready()
    started = time.monotonic()
    worker.start()
    took = view.wait_new_ready(beat, started)
    worker.wait_for_ssh()
    mount_bundle(worker)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(machine_details(), flush=True)
    work = STATE / "bundle"
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, list[float]]] = {k: {"boot": [], "restart": [], "restart_returned": []}
                                                  for k in KUBELETS}
    bed = (image(), bundles.build(work))
    api_port = free_port()
    cluster = None
    try:
        print("bench: bringing up the cluster (two VMs, kubeadm init and join)", flush=True)
        cluster = up(bed, private_network(), api_port)
        worker = cluster.worker
        worker.ssh("install -m 0755 /bundle/bin/kubelet /usr/local/bin/kubelet-real")
        with tempfile.TemporaryDirectory() as tmp:
            view = HostView(cluster, api_port, Path(tmp))
            view.wait_new_ready("", time.monotonic())
            for round_ in range(args.rounds):
                for kubelet in KUBELETS:
                    switch(worker, view, kubelet)
                    ready, returned = measure_restart(worker, view)
                    results[kubelet]["restart"].append(ready)
                    results[kubelet]["restart_returned"].append(returned)
                    results[kubelet]["boot"].append(measure_boot(worker, view))
                    print(f"bench: round {round_ + 1} {kubelet}: restart→Ready {ready:.1f}s "
                          f"(systemctl returned {returned:.1f}s), boot→Ready {results[kubelet]['boot'][-1]:.1f}s",
                          flush=True)
    finally:
        for name in ("pkl-cp", "pkl-w1"):
            Machine(name, 0, bed[0], bed[1], 0, 0).down()
        shutil.rmtree(work, ignore_errors=True)
        remove_state()
    print(f"\n{'worker, qemu TCG':<38}{'pykubelet p50':>14}{'kubelet p50':>13}{'ratio':>7}   (n={args.rounds} each)")
    for key, label in (("boot", "machine start → Node Ready"), ("restart", "systemctl restart → Node Ready"),
                       ("restart_returned", "systemctl restart returns (READY=1)")):
        ours, theirs = statistics.median(results["pykubelet"][key]), statistics.median(results["kubelet"][key])
        print(f"{label:<38}{ours:>13.1f}s{theirs:>12.1f}s{ours / theirs:>7.2f}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
