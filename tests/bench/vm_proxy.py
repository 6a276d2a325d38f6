"""Service proxying in IPVS mode: `pykubelet proxy` vs the real kube-proxy v1.36.3, in the same
Debian 12 VM, same run (this machine's kernel has no IPVS; the VM's Debian kernel has it).

    python -m tests.bench.vm_proxy [--services 1000] [--latency 20] [--rounds 1]

One VM provisioned as the Vagrantfile's control plane (tests/vm/kubeadm_cluster.py), kube-proxy
(tests/bed/build-kube-proxy.sh) copied in (the image has Debian's ipset, which kube-proxy's IPVS
mode runs). Then, for each proxy, started by hand in IPVS mode on a node both
proxies' `--cleanup` left clean, and stopped after each measurement (tests/bench/vm_proxy_node.py
does each step inside the VM):
1. Service created -> first connection, as tests/bench/proxy.py measures it: a selectorless
   Service and its EndpointSlice (one endpoint, a listener behind a veth pair) created through the
   API while a client on the node tries the cluster IP every few milliseconds; 20 Services.
2. First full sync at N Services x 10 endpoints: kubeproxy_sync_full_proxy_rules_duration_seconds,
   which both report, and the wall time from the proxy's start until that sync is done.
With --rounds above 1, the proxies take turns going first.

The VM emulates its CPU (TCG, ~19x slower than this host) and shares its 2 cores: the numbers
say how the two proxies compare on a slow machine, not what either takes on real hardware.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.bench.proxy_measure import ENDPOINTS_PER_SERVICE, latency_table, sync_table
from tests.bench.startup import machine as machine_details
from tests.helpers import wait_for
from tests.progress import say
from tests.vm import bundle as bundles
from tests.vm.conftest import BUNDLE_MOUNT, image
from tests.vm.kubeadm_cluster import Cluster, one_node_cluster
from tests.vm.machine import REPO, STATE, Machine, insecure_key, private_network, remove_state

NODE, NUMBER = "pkl-bench-proxy", 13
KINDS = ("kube-proxy", "pykubelet")
KUBE_PROXY = bundles.K8S_BIN / "kube-proxy"
PROFILE_ABOVE = 1.5  # pykubelet's sync this many times kube-proxy's: profiled in the same run
STEP = (f"cd {BUNDLE_MOUNT}/repo && PYTHONDONTWRITEBYTECODE=1 /opt/pykubelet/venv/bin/python "
        "-m tests.bench.vm_proxy_node")


def copy_in(machine: Machine, files: list[Path], target: str) -> None:
    """Files into `target` on the VM (scp as Vagrant's user, then moved as root)."""
    subprocess.run(["scp", "-q", "-i", str(insecure_key()), "-P", str(machine.ssh_port), "-o", "BatchMode=yes",
                    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                    *map(str, files), "vagrant@127.0.0.1:/tmp/"], check=True, timeout=900)
    names = " ".join(shlex.quote(f"/tmp/{f.name}") for f in files)
    machine.ssh(f"mkdir -p {target} && mv {names} {target}/", timeout=120)


def step(machine: Machine, *args: str, timeout: float = 2700) -> dict:
    """One step of tests/bench/vm_proxy_node.py in the VM; its JSON result."""
    started = time.monotonic()
    result = machine.ssh(f"{STEP} {shlex.join(args)}", timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"in the VM, step {' '.join(args)} failed ({result.returncode}):\n"
                           f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
    say("bench", f"  {args[0]} done in {time.monotonic() - started:.0f} s")
    return json.loads(result.stdout.strip().splitlines()[-1])


def prepare(cluster: Cluster) -> dict[str, str]:
    """kube-proxy installed, the endpoint set up; the VM's versions."""
    say("bench", "copying kube-proxy into the VM")
    copy_in(cluster.cp, [KUBE_PROXY], "/root/bench")
    cluster.cp.ssh("install -m 0755 /root/bench/kube-proxy /usr/local/bin/kube-proxy", timeout=600)
    step(cluster.cp, "setup")
    facts = cluster.cp.ssh("uname -r; /usr/local/bin/kube-proxy --version; ipset --version | head -1; "
                           "iptables --version; /opt/pykubelet/venv/bin/python --version; "
                           ". /etc/os-release; echo $PRETTY_NAME", timeout=300).stdout.splitlines()
    return dict(zip(("kernel", "kube-proxy", "ipset", "iptables", "python", "os"), facts))


def measure(cluster: Cluster, args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Into `results`, as the steps finish (a failed run still prints what it measured)."""
    orders = [KINDS if r % 2 == 0 else KINDS[::-1] for r in range(args.rounds)]
    for round_, order in enumerate(orders):
        for kind in order:
            say("bench", f"round {round_ + 1}: Service -> first connection, {kind} ({args.latency} Services)")
            try:
                out = step(cluster.cp, "latency", "--kind", kind, "--node", NODE, "--label", f"{kind}-{round_}",
                           "--count", str(args.latency))
            except RuntimeError as e:  # reported; the sync measurement still runs
                results["errors"].append(str(e)[-4000:])
                say("bench", f"  failed: {str(e)[-4000:]}")
                continue
            results["latency"][kind] += out["seconds"]
            say("bench", f"  p50 {statistics.median(out['seconds']) * 1000:.0f} ms")
    say("bench", f"creating {args.services:,} Services x {ENDPOINTS_PER_SERVICE} endpoints")
    step(cluster.cp, "bulk", "--services", str(args.services))
    for round_, order in enumerate(orders):
        for kind in order:
            say("bench", f"round {round_ + 1}: first full sync of {args.services:,} Services, {kind}")
            out = step(cluster.cp, "sync", "--kind", kind, "--node", NODE, "--services", str(args.services))
            results["sync"][kind].append([out["sync"], out["ready"]])
            say("bench", f"  {out['sync']:.3f} s ({out['ready']:.1f} s from start; "
                         f"{out['virtual_servers']} virtual servers)")
    kube_proxy, ours = (statistics.median(r[0] for r in results["sync"][k]) for k in KINDS)
    if args.profile or ours > PROFILE_ABOVE * kube_proxy:
        say("bench", f"profiling pykubelet's first full sync ({ours / kube_proxy:.1f}x kube-proxy's)")
        try:
            results["profile"] = step(cluster.cp, "profile", "--node", NODE, "--services", str(args.services))
        except RuntimeError as e:
            results["errors"].append(str(e)[-4000:])


def report(args: argparse.Namespace, facts: dict[str, str], results: dict[str, Any]) -> None:
    def median_pair(kind: str) -> tuple[float, float]:
        runs = results["sync"][kind]
        return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)

    print(f"\nhost: {machine_details()}\nVM: {facts.get('os')} under qemu TCG, 2 vCPU, 2 GiB, kernel "
          f"{facts.get('kernel')}, {facts.get('python')}, {facts.get('iptables')}, {facts.get('ipset')}\n"
          f"{facts.get('kube-proxy')}, rounds: {args.rounds}\n")
    print(f"Service created -> first connection, {args.latency} Services one by one per round (ms)\n")
    if all(results["latency"].values()):
        print(latency_table([("ipvs", results["latency"]["kube-proxy"], results["latency"]["pykubelet"])]))
    for error in results["errors"]:
        print(f"failed: {error}")
    print(f"\nFirst full sync into a clean node, {ENDPOINTS_PER_SERVICE} endpoints per Service (seconds; "
          "start -> synced in parentheses; medians of the rounds)\n")
    print(sync_table([("ipvs", args.services, median_pair("kube-proxy"), median_pair("pykubelet"))]))
    if "profile" in results:
        print(f"\npykubelet's first full sync under cProfile: {results['profile']['sync']:.3f} s\n"
              f"{results['profile'].pop('stats')}")
    print(json.dumps(results))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--latency", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help=f"profile pykubelet's sync even when it is not {PROFILE_ABOVE}x kube-proxy's or more")
    args = parser.parse_args()
    # A SIGTERM (timeout, a stopped make) ends the run through the `finally`s: the VM goes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    say("bench", machine_details())
    subprocess.run(["bash", str(REPO / "tests" / "bed" / "build-kube-proxy.sh")], check=True)
    work = STATE / "bundle"
    work.mkdir(parents=True, exist_ok=True)
    bed = None
    results: dict[str, Any] = {"latency": {k: [] for k in KINDS}, "sync": {k: [] for k in KINDS}, "errors": []}
    try:
        bed = (image(), bundles.build(work))
        with one_node_cluster(bed, private_network(), NODE, NUMBER) as cluster:
            asyncio.run(wait_for(lambda: cluster.ready(NODE), 900, f"{NODE} Ready", interval=5,
                                 describe=cluster.describe))
            facts = prepare(cluster)
            measure(cluster, args, results)
    except BaseException:
        print(f"measured before the failure: {json.dumps(results)}", flush=True)
        raise
    finally:
        if bed is not None:  # by name: a VM that booted goes even when provisioning failed half-way
            Machine(NODE, 0, bed[0], bed[1], 0, 0).down()
        shutil.rmtree(work, ignore_errors=True)
        remove_state()
    report(args, facts, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
