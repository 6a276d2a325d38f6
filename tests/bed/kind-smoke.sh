#!/usr/bin/env bash
# kind-smoke.sh IMAGE [NAME [WORKER_IMAGE]]: one kind cluster (a control plane on node image IMAGE,
# a worker on WORKER_IMAGE if given, else IMAGE) checked the way a user would, each step timed,
# then deleted: nodes Ready, system and CNI pods, kind load image-archive, a pod on each node,
# logs, exec across nodes, port-forward, and kind delete cluster leaving nothing.
# The steps are tests/kind/smoke.py's (the kind tier, `make kind-test`, runs the same ones);
# this is its command line. KIND_SMOKE_KEEP=1 keeps the cluster. PYTHON picks the interpreter
# (default: the repository's .venv).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
exec "${PYTHON:-$repo/.venv/bin/python}" -m tests.kind.smoke "$@"
