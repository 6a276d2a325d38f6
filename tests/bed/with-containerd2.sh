#!/usr/bin/env bash
# with-containerd2.sh CMD...: runs CMD against a containerd 2.x of its own (containerd-node.sh
# --containerd2, node "pkl-cd2"), with PYKUBELET_TEST_ENDPOINT set to its socket, so the runtime
# tests (tests/runtime/conftest.py) talk to it instead of the machine's containerd, and
# PYKUBELET_CONTAINERD=2, so the containerds tests start themselves are 2.x as well; stops it
# afterwards, whatever CMD did. It uses the machine's CNI config dir (/etc/cni/net.d) as the
# main containerd does: the agents of the runtime tests write their network config there.
# `make test-containerd2` runs the runtime tier this way.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node=${PYKUBELET_CONTAINERD2_NODE:-pkl-cd2}
[ $# -gt 0 ] || { echo "usage: $0 CMD..." >&2; exit 2; }

bash "$here/containerd-node.sh" down "$node" >/dev/null 2>&1 || true  # a killed run's leftover
trap 'bash "$here/containerd-node.sh" down "$node"' EXIT
endpoint=$(bash "$here/containerd-node.sh" up "$node" --containerd2 --cni-conf-dir /etc/cni/net.d | tail -n1)
echo "containerd 2.x at $endpoint: $("$(bash "$here/build-containerd2.sh" --bin-dir)/ctr" \
    --address "${endpoint#unix://}" version | sed -n 's/^  Version: *//p' | tail -n1)"
# PYKUBELET_CONTAINERD=2: the tests that start a containerd of their own (containerd-node.sh) get 2.x too.
PYKUBELET_CONTAINERD=2 PYKUBELET_TEST_ENDPOINT=$endpoint "$@"
