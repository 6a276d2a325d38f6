#!/usr/bin/env bash
# Builds Kubernetes' end-to-end test binary (e2e.test), the ginkgo runner and the
# programs of the test images (agnhost, nnp, sample-apiserver: tests/bed/images_e2e.py packs them)
# of one pinned release from the published Go modules, into a cache OUTSIDE the repo:
#   ${PYKUBELET_CACHE:-/var/cache/pykubelet}/e2e/$K8S_VERSION/bin/{e2e.test,ginkgo,agnhost,nnp,sample-apiserver}
# The same way build-control-plane.sh builds the control plane: a throwaway module
# that requires k8s.io/kubernetes and points every k8s.io/<staging> module at its
# published v0.X.Y, and the same Go module and build caches (a warm build cache
# from the control plane saves most of the work). Idempotent: a second run with
# the same version is a no-op, and a program added to the list later is built
# alone. The first run takes tens of minutes on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/k8s-module.sh"
K8S_VERSION=${K8S_VERSION:-v1.36.3}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/e2e/$K8S_VERSION
BIN=$OUT/bin
STAMP=$BIN/.stamp
WANT="k8s=$K8S_VERSION"

PROGRAMS=(ginkgo agnhost nnp sample-apiserver e2e.test)
# The test images' BusyBox, from its upstream source (its own script: no Go involved).
bash "$here/build-busybox.sh"

# missing: the programs to build, one a line: every one for another release, else those not built yet.
missing() {
  local p same=
  [[ -f $STAMP && $(<"$STAMP") == "$WANT" ]] && same=1
  for p in "${PROGRAMS[@]}"; do
    [[ -n $same && -x $BIN/$p ]] || echo "$p"
  done
}
if [[ -z $(missing) ]]; then
  echo "${PROGRAMS[*]} $WANT already built in $BIN"
  exit 0
fi

mkdir -p "$BIN" "$OUT/src"
# Two concurrent first runs (make conformance and the CI test) would fight
# over the module directory: serialise them, then re-check.
exec 9>"$OUT/.lock"
flock 9
mapfile -t todo < <(missing)
if ((${#todo[@]} == 0)); then echo "${PROGRAMS[*]} $WANT already built in $BIN"; exit 0; fi
# wanted NAME: whether this run builds NAME.
wanted() { printf '%s\n' "${todo[@]}" | grep -qxF "$1"; }

k8s_go_env
say() { echo "[build-conformance $(date +%T)] $*"; }
say "building ${todo[*]} $WANT with $(go version) into $BIN"

cd "$OUT/src"
k8s_module pykubelet.local/e2e-build
k8s_dir=$(k8s_source_dir)
# tools.go keeps, for `go mod tidy`, the ginkgo command and every package the
# e2e suite's main test file pulls in (its imports register the specs).
{
  echo "//go:build tools"
  echo
  echo "package tools"
  echo
  echo "import ("
  echo '	_ "github.com/onsi/ginkgo/v2/ginkgo"'
  echo '	_ "k8s.io/kubernetes/test/e2e"'
  echo '	_ "k8s.io/kubernetes/test/images/agnhost"'
  echo '	_ "k8s.io/kubernetes/test/images/nonewprivs"'
  echo '	_ "k8s.io/sample-apiserver"'
  sed -n '/^import (/,/^)/p' "$k8s_dir/test/e2e/e2e_test.go" | grep -o '"k8s.io/kubernetes/[^"]*"' |
    sed 's/^/	_ /'
  echo ")"
} >tools.go
t0=$SECONDS
say "resolving the module graph (downloads the modules on a fresh machine)"
go mod tidy
say "module graph resolved in $((SECONDS - t0))s"

# The release stamped in (the suite logs it and compares it with the server's).
ldflags=$(k8s_ldflags)

# build_program NAME PACKAGE LDFLAGS: one static program into $BIN, if this run builds it.
build_program() {
  local t0=$SECONDS
  wanted "$1" || return 0
  say "building $1 ($2)"
  CGO_ENABLED=0 run_with_progress "$1" go build -p 2 -trimpath -ldflags "$3" -o "$BIN/.$1.new" "$2"
  mv -f "$BIN/.$1.new" "$BIN/$1"
  say "built $1 in $((SECONDS - t0))s"
}
build_program ginkgo github.com/onsi/ginkgo/v2/ginkgo "-s -w"
# The test images' programs, as their Makefiles build them (test/images/image-util.sh: static, -w).
build_program agnhost k8s.io/kubernetes/test/images/agnhost \
  "-w -X 'main.Version=$(<"$k8s_dir/test/images/agnhost/VERSION")'"
build_program nnp k8s.io/kubernetes/test/images/nonewprivs "-w"
# The aggregator spec's API server: upstream's image builds this module's main package at a tag of
# its repository; here the module of the same release as everything else (in the graph already).
build_program sample-apiserver k8s.io/sample-apiserver "-w"

if wanted e2e.test; then
  t0=$SECONDS
  say "building e2e.test (the longest part: a binary of most of Kubernetes)"
  CGO_ENABLED=0 run_with_progress e2e.test go test -c -p 2 -trimpath -tags "$TAGS" -ldflags "$ldflags" \
    -o "$BIN/.e2e.test.new" k8s.io/kubernetes/test/e2e
  mv -f "$BIN/.e2e.test.new" "$BIN/e2e.test"
  say "built e2e.test in $((SECONDS - t0))s"
fi

echo "$WANT" >"$STAMP"
"$BIN/ginkgo" version
say "done: $BIN"
