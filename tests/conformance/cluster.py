"""`make conformance-cluster`: e2e.test's [Conformance] specs on a three-node kubeadm cluster.

    python -m tests.conformance.cluster [--node pykubelet|kubelet] [--procs 2]

Builds the cluster (cluster_bed.py: a control plane and two workers, every kubelet pykubelet and
every proxy pykubelet proxy, or with --node kubelet the real kubelet and kube-proxy v1.36.3),
runs the selection (CONFORMANCE_FOCUS / CONFORMANCE_SKIP override it) the way certification
does, with a JUnit report and a summary in build/conformance-cluster/<node>/ (what differs from
the other node type's last run included), and removes the cluster. A killed run's leftovers are
removed before the next one starts.

How certification runs the suite, and this run: every `[Conformance]` spec, `[Serial]` and
`[Disruptive]` ones included. ginkgo runs the specs a `[Serial]` tag marks (e2e's framework
makes it ginkgo's Serial decorator) alone, on one process, after all the parallel ones have
finished; with --procs 1 the run is sonobuoy's certified-conformance mode exactly (one process,
one spec after the other).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import signal
import sys
import time

from tests.conformance import cluster_bed, suite
from tests.conformance.cluster_bed import Cluster, say

RESULTS = cluster_bed.BED.parents[1] / "build" / "conformance-cluster"
FOCUS = r"\[Conformance\]"
# The sample CI runs (tests/kubeadm/test_conformance_sample.py) and --sample selects: what a cluster
# of pykubelet nodes adds to one node's conformance, pods reaching each other, Services and names
# across nodes, through flannel, pykubelet proxy and CoreDNS (each name is a spec's text up to its
# labels)
SAMPLE_SPECS = (
    "[sig-network] DNS should provide DNS for the cluster",
    "[sig-network] DNS should provide DNS for services",
    "[sig-network] Services should serve a basic endpoint from pods",
    "[sig-network] Services should be able to create a functioning NodePort service",
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http",
    "[sig-network] Networking Granular Checks: Pods should function for node-pod communication: http",
)
SAMPLE = "(" + "|".join(re.escape(spec) for spec in SAMPLE_SPECS) + r") (\[[^\]]*\] )*\[Conformance\]"
SKIP = ""  # certification's: nothing


def conformance(kind: str, focus: str, skip: str, procs: int, results: pathlib.Path,
                timeout: str = suite.SUITE_TIMEOUT) -> list[suite.Result]:
    """The whole run on a fresh cluster; the results (also in results/junit.xml)."""
    results.mkdir(parents=True, exist_ok=True)
    with cluster_bed.exclusive(kind):
        cluster_bed.remove_leftovers(kind)
        cluster = Cluster(kind)
        try:
            names = suite.selected(results / "dry-run", focus, skip)
            if not names:
                raise RuntimeError(f"the selection holds no spec: focus {focus!r}, skip {skip!r}")
            started = time.monotonic()
            cluster.up()
            say(f"cluster up in {(time.monotonic() - started) / 60:.1f} min")
            outcome = suite.run(results, focus, skip, procs, len(names), timeout, target=cluster.target())
            if lost := cluster.lost_private_dirs():
                raise RuntimeError(f"the nodes lost their own {', '.join(lost)} during the run (a run of older "
                                   "code on another LAN removed the machine's mount point): the results are not valid")
            return outcome
        finally:
            say("removing the cluster")
            cluster.down()


def stop_on_sigterm() -> None:
    """A terminated run cleans up as an interrupted one does (the finally blocks run)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", choices=("pykubelet", "kubelet"), default=os.environ.get("NODE", "pykubelet"))
    parser.add_argument("--procs", type=int, default=int(os.environ.get("CONFORMANCE_PROCS", "2")))
    parser.add_argument("--focus", default=os.environ.get("CONFORMANCE_FOCUS") or FOCUS)
    parser.add_argument("--sample", action="store_const", const=SAMPLE, dest="focus",
                        help="only the sample of cross-node Service, DNS and pod-network specs")
    parser.add_argument("--skip", default=os.environ.get("CONFORMANCE_SKIP") or SKIP)
    parser.add_argument("--results", type=pathlib.Path, default=None,
                        help="where the JUnit report and logs go (default build/conformance-cluster/<node>)")
    args = parser.parse_args(argv)
    stop_on_sigterm()
    results_dir = args.results or RESULTS / args.node
    start = time.monotonic()
    results = conformance(args.node, args.focus, args.skip, args.procs, results_dir)
    return suite.report(results, RESULTS, args.node, results_dir, f"[Conformance] on a {args.node} cluster", start)


if __name__ == "__main__":
    sys.exit(main())
