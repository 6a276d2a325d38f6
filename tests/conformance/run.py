"""`make conformance`: Kubernetes' own [NodeConformance] e2e specs on one node.

    python -m tests.conformance.run [--node pykubelet|kubelet] [--procs 3]

Builds what is missing (the control plane, e2e.test, ginkgo and the test images; cached under
/var/cache/pykubelet), starts a control plane and one worker node of its own (see bed.py),
runs the selection (CONFORMANCE_FOCUS / CONFORMANCE_SKIP override it) with a JUnit report in
build/conformance/<node>/, prints passed / failed / skipped with a one-line reason per failure,
and what differs from the other node agent's last run when there is one. Everything it started
is stopped and removed at the end; what a killed run left is removed before it starts (owned.py).
"""

from __future__ import annotations

import pathlib
import sys
import time

from tests.conformance import bed, owned, suite

RESULTS = bed.REPO / "build" / "conformance"


def conformance(kind: str, focus: str, skip: str, procs: int, results: pathlib.Path,
                timeout: str = suite.SUITE_TIMEOUT) -> list[suite.Result]:
    """The whole run on a fresh cluster and node; the results (also in results/junit.xml)."""
    bed.build()
    results.mkdir(parents=True, exist_ok=True)
    with bed.exclusive():
        owned.remove_leftovers_of_earlier_runs()
        with bed.control_plane():
            return _run_on_a_node(kind, focus, skip, procs, results, timeout)


def _run_on_a_node(kind: str, focus: str, skip: str, procs: int, results: pathlib.Path,
                   timeout: str) -> list[suite.Result]:
    names = suite.selected(results / "dry-run", focus, skip)
    if not names:
        raise RuntimeError(f"the selection holds no spec: focus {focus!r}, skip {skip!r}")
    node = bed.Node(kind, results)
    try:
        node.start()
        return suite.run(results, focus, skip, procs, len(names), timeout)
    finally:
        bed.say(f"stopping node {node.name} and the control plane")
        node.stop()


def main(argv: list[str] | None = None) -> int:
    parser = suite.arguments(__doc__.split("\n\n")[0], ("pykubelet", "kubelet"), "build/conformance/<node>")
    args = parser.parse_args(argv)
    results_dir = args.results or RESULTS / args.node
    start = time.monotonic()
    results = conformance(args.node, args.focus, args.skip, args.procs, results_dir)
    return suite.report(results, RESULTS, args.node, results_dir, f"[NodeConformance] on {args.node}", start)


if __name__ == "__main__":
    sys.exit(main())
