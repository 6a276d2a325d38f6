#!/usr/bin/env bash
# Builds containerd $CONTAINERD2_VERSION (the 2.x line) from its published Go module
# github.com/containerd/containerd/v2: containerd, containerd-shim-runc-v2 and ctr, into
#   ${PYKUBELET_CACHE:-/var/cache/pykubelet}/containerd2/$CONTAINERD2_VERSION/bin
# for the containerd 2.x tier (tests/bed/containerd-node.sh --containerd2). The machine's own
# containerd (Debian's 1.6) is untouched: nothing here is installed on the PATH.
#
# Flags are upstream's Makefile's for its static release (STATIC=1): tags urfave_cli_no_docs
# osusergo netgo static_build, -s -w, the version stamped into version.Version/Package; the shim
# as upstream always builds it (CGO_ENABLED=0, the extra tag no_grpc, -extldflags -static).
# cgo is off for the daemon and ctr too: its only user in containerd is the btrfs snapshotter,
# which the test bed does not use (overlayfs or native) and which would need btrfs headers.
# The shim runs Debian's runc (1.1.x); containerd 2.x drives runc through the same CLI.
# `build-containerd2.sh --bin-dir` prints where the binaries are (or will be) and builds nothing.
# Idempotent (a stamp file): a second run is a no-op; the first takes several minutes on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONTAINERD2_VERSION=${CONTAINERD2_VERSION:-v2.4.2}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/containerd2/$CONTAINERD2_VERSION
BIN=$OUT/bin
STAMP=$BIN/.stamp
MODULE=github.com/containerd/containerd/v2
WANT="$MODULE@$CONTAINERD2_VERSION"
[[ ${1:-} == --bin-dir ]] && { echo "$BIN"; exit 0; }
say() { echo "[build-containerd2 $(date +%T)] $*"; }

built() {
  [[ -f $STAMP && $(<"$STAMP") == "$WANT" ]] || return 1
  local b
  for b in containerd containerd-shim-runc-v2 ctr; do [[ -x $BIN/$b ]] || return 1; done
}
if built; then echo "containerd $CONTAINERD2_VERSION already built in $BIN"; exit 0; fi
mkdir -p "$BIN"
exec 9>"$OUT/.lock"  # never two builds of it at once
flock 9
if built; then echo "containerd $CONTAINERD2_VERSION already built in $BIN"; exit 0; fi

source "$here/k8s-module.sh"  # the Go toolchain, caches and progress reports every build shares
k8s_go_env
t0=$SECONDS
say "downloading $WANT"
src=$(go mod download -json "$WANT" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -f $src/go.mod ]] || { echo "cannot find the source of $WANT" >&2; exit 1; }
# The module's own go.mod and go.sum are the build's: the same dependency versions as upstream.
cd "$src"

pkg=$MODULE
ldflags="-X $pkg/version.Version=$CONTAINERD2_VERSION -X $pkg/version.Package=$MODULE -s -w"
tags="urfave_cli_no_docs osusergo netgo static_build"
for cmd in containerd ctr; do
  say "building $cmd (a few minutes on 2 cores the first time)"
  CGO_ENABLED=0 run_with_progress "$cmd" go build -p 2 -trimpath -tags "$tags" \
    -ldflags "$ldflags -extldflags -static" -o "$BIN/.$cmd.new" "./cmd/$cmd"
done
say "building containerd-shim-runc-v2"
CGO_ENABLED=0 run_with_progress containerd-shim-runc-v2 go build -p 2 -trimpath -tags "$tags no_grpc" \
  -ldflags "$ldflags -extldflags -static" -o "$BIN/.containerd-shim-runc-v2.new" ./cmd/containerd-shim-runc-v2
for b in containerd ctr containerd-shim-runc-v2; do mv -f "$BIN/.$b.new" "$BIN/$b"; done
echo "$WANT" >"$STAMP"
say "built in $((SECONDS - t0))s: $("$BIN/containerd" --version)"
