#!/usr/bin/env bash
# Builds the real kube-proxy of the pinned release, the baseline of the proxy
# benchmark (tests/bench/proxy.py), into the control plane's cache:
#   ${PYKUBELET_CACHE:-/var/cache/pykubelet}/k8s/$K8S_VERSION/bin/kube-proxy
# A cached step of its own, with its own stamp, so adding it never invalidates
# the control plane build (build-control-plane.sh), whose module graph it reuses.
# Idempotent: a second run is a no-op; the first takes a few minutes on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_VERSION=${K8S_VERSION:-v1.36.3}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/k8s/$K8S_VERSION
BIN=$OUT/bin
STAMP=$BIN/.stamp-kube-proxy
WANT="kube-proxy=$K8S_VERSION"
say() { echo "[build-kube-proxy $(date +%T)] $*"; }

built() { [[ -x $BIN/kube-proxy && -f $STAMP && $(<"$STAMP") == "$WANT" ]]; }
if built; then echo "kube-proxy $K8S_VERSION already built in $BIN"; exit 0; fi

# The control plane first: its generated go.mod (every staging module mapped to
# its published release) is where this build starts from.
bash "$here/build-control-plane.sh"
exec 9>"$OUT/.lock"  # the same lock: never two Go builds in one module cache at once
flock 9
if built; then echo "kube-proxy $K8S_VERSION already built in $BIN"; exit 0; fi

source "$here/k8s-module.sh"
k8s_go_env

src=$OUT/src/kube-proxy
mkdir -p "$src"
cp "$OUT/src/k8s/go.mod" "$OUT/src/k8s/go.sum" "$src/"
sed -i 's|^module .*|module pykubelet.local/kube-proxy-build|' "$src/go.mod"
printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-proxy"\n' >"$src/tools.go"
cd "$src"
t0=$SECONDS
say "resolving kube-proxy's module graph"
go mod tidy
ldflags=$(k8s_ldflags)
say "building kube-proxy (a few minutes on 2 cores)"
CGO_ENABLED=0 run_with_progress kube-proxy go build -p 2 -trimpath -tags "$TAGS" -ldflags "$ldflags" \
  -o "$BIN/.kube-proxy.new" k8s.io/kubernetes/cmd/kube-proxy
mv -f "$BIN/.kube-proxy.new" "$BIN/kube-proxy"
echo "$WANT" >"$STAMP"
say "built kube-proxy in $((SECONDS - t0))s: $("$BIN/kube-proxy" --version)"
