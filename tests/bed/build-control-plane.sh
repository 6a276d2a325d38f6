#!/usr/bin/env bash
# Builds a real Kubernetes control plane (plus kubectl, a reference kubelet,
# kubeadm and etcd) from the published Go modules of one pinned release, into a
# cache OUTSIDE the repo:
#   ${PYKUBELET_CACHE:-/var/cache/pykubelet}/k8s/$K8S_VERSION/bin/
# Only the Go module proxy is reachable here (no release tarballs, no images),
# so we compile instead of downloading. Idempotent: a second run with the same
# versions is a no-op. The first run takes tens of minutes on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/k8s-module.sh"
K8S_VERSION=${K8S_VERSION:-v1.36.3}
# The etcd that Kubernetes itself pins for this release (build/dependencies.yaml,
# kubeadm's DefaultEtcdVersion); kubeadm accepts >= 3.5.24 as external etcd.
ETCD_VERSION=${ETCD_VERSION:-v3.6.8}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/k8s/$K8S_VERSION
BIN=$OUT/bin
STAMP=$BIN/.stamp
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kubeadm)
WANT="k8s=$K8S_VERSION etcd=$ETCD_VERSION"

built() {
  local b
  for b in "${K8S_CMDS[@]}" etcd; do [[ -x $BIN/$b ]] || return 1; done
  [[ -f $STAMP && $(<"$STAMP") == "$WANT" ]]
}
if built; then
  echo "control plane $WANT already built in $BIN"
  exit 0
fi

mkdir -p "$BIN" "$OUT/src/k8s" "$OUT/src/etcd"
# Two concurrent first runs (a developer and a test) would fight over the
# module directories: serialise them, then re-check.
exec 9>"$OUT/.lock"
flock 9
if built; then echo "control plane $WANT already built in $BIN"; exit 0; fi

k8s_go_env
say() { echo "[build-control-plane $(date +%T)] $*"; }
say "building $WANT with $(go version) into $BIN"

# --- etcd ---------------------------------------------------------------------
# etcd's own main is a one-liner around etcdmain.Main; building it from our
# own module keeps etcd's dependency versions (not Kubernetes') in force. The
# smallest build goes first: a broken step fails in seconds on a warm Go cache
# (fresh-check.sh --link-only), not after the Kubernetes links.
cd "$OUT/src/etcd"
etcd_go=$(go_directive "$(module_gomod "go.etcd.io/etcd/server/v3@$ETCD_VERSION")")
cat >go.mod <<EOF
module pykubelet.local/etcd-build

go $etcd_go

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
cat >main.go <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
t0=$SECONDS
say "building etcd $ETCD_VERSION"
go mod tidy
CGO_ENABLED=0 run_with_progress etcd go build -p 2 -trimpath -ldflags "-s -w" -o "$BIN/.etcd.new" .
mv -f "$BIN/.etcd.new" "$BIN/etcd"
say "built etcd in $((SECONDS - t0))s"

# --- Kubernetes -------------------------------------------------------------
# A throwaway module that requires k8s.io/kubernetes (k8s-module.sh).
cd "$OUT/src/k8s"
k8s_module pykubelet.local/k8s-build
# tools.go only exists so `go mod tidy` keeps the commands' dependencies.
{
  echo "//go:build tools"
  echo
  echo "package tools"
  echo
  echo "import ("
  for c in "${K8S_CMDS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
  echo ")"
} >tools.go
t0=$SECONDS
say "resolving the k8s module graph (downloads the modules on a fresh machine)"
go mod tidy
say "k8s module graph resolved in $((SECONDS - t0))s"

ldflags=$(k8s_ldflags)
for c in "${K8S_CMDS[@]}"; do
  t0=$SECONDS
  say "building $c (minutes each on 2 cores on a cold Go cache)"
  # Upstream links everything statically except the kubelet (cgo when available).
  cgo=0; [[ $c == kubelet ]] && cgo=$(go env CGO_ENABLED)
  CGO_ENABLED=$cgo run_with_progress "$c" go build -p 2 -trimpath -tags "$TAGS" -ldflags "$ldflags" \
    -o "$BIN/.$c.new" "k8s.io/kubernetes/cmd/$c"
  mv -f "$BIN/.$c.new" "$BIN/$c"
  say "built $c in $((SECONDS - t0))s"
done

echo "$WANT" >"$STAMP"
"$BIN/kubectl" version --client
"$BIN/etcd" --version | sed -n 1p  # sed reads it all: head would end etcd with SIGPIPE (pipefail)
say "done: $BIN"
