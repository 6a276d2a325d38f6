# shellcheck shell=bash
# Sourced by build-control-plane.sh and build-conformance.sh: what building programs of one
# Kubernetes release from its published Go modules takes, the same for every build.
#
# k8s.io/kubernetes points every k8s.io/<staging> module at ./staging/src through replace
# directives, which Go ignores in a dependency; a throwaway module that requires it mirrors each
# of them with the published v0.X.Y of the same release.
#
# What a script takes from here comes as a function's output (k8s_dir=$(k8s_source_dir)) or as
# an UPPER-CASE setting: shellcheck checks each script on its own, so it flags any lower-case
# variable a script reads without assigning it (tests/unit/test_shell_scripts.py).

# k8s_go_env: the Go toolchain and caches every build uses. The module and build caches live
# under $CACHE/go (or $PYKUBELET_GO_CACHE: fresh-check.sh --link-only builds into an empty cache
# with the machine's), shared by the builds, so a later build (or a new patch release) reuses
# most of the work; TAGS are what Kubernetes' own build (hack/lib/golang.sh) uses for release
# binaries.
k8s_go_env() {
  local go_cache=${PYKUBELET_GO_CACHE:-$CACHE/go}
  command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
  export GOMODCACHE=$go_cache/mod GOCACHE=$go_cache/build
  export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local GOWORK=off
  # shellcheck disable=SC2034  # read by the scripts that source this file
  TAGS=selinux,notest,grpcnotrace
}

# module_gomod MODULE@VERSION: the path of that published module's go.mod in the module cache
# (downloaded first on a fresh machine).
module_gomod() {
  local gomod
  gomod=$(go mod download -json "$1" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  [[ -f $gomod ]] || { echo "cannot find go.mod of $1" >&2; return 1; }
  echo "$gomod"
}

# go_directive GOMOD: its `go` line's version. A module that requires another needs at least the
# Go language version that one declares.
go_directive() { awk '$1 == "go" {print $2; exit}' "$1"; }

# k8s_module NAME: write go.mod in the current directory for module NAME, requiring
# k8s.io/kubernetes $K8S_VERSION with its staging modules replaced.
k8s_module() {
  local k8s_gomod staging_version
  k8s_gomod=$(module_gomod "k8s.io/kubernetes@$K8S_VERSION")
  staging_version=v0.${K8S_VERSION#v1.}
  {
    echo "module $1"
    echo
    echo "go $(go_directive "$k8s_gomod")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's|^\s*\(k8s\.io/[^ ]*\) => \./staging/src/.*$|\t\1 => \1 '"$staging_version"'|p' "$k8s_gomod"
    echo ")"
  } >go.mod
}

# k8s_source_dir: where the Go module cache keeps the source of k8s.io/kubernetes $K8S_VERSION.
k8s_source_dir() {
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

# k8s_ldflags: -s -w and what hack/lib/version.sh stamps in, so the programs report the release
# (/version, `kubectl version`, the e2e suite's log) rather than v0.0.0-master.
k8s_ldflags() {
  local minor=${K8S_VERSION#v1.} pkg ldflags="-s -w"
  minor=${minor%%.*}
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  echo "$ldflags"
}

# run_with_progress WHAT CMD...: a Go build prints nothing for minutes; say (with the caller's
# `say`) every 30 s that it is still going and how much it has added to the build cache.
run_with_progress() {
  local what=$1; shift
  local t0=$SECONDS before now pid rc=0
  before=$(find "$GOCACHE" -type f 2>/dev/null | wc -l)
  "$@" &
  pid=$!
  while ! wait_timeout "$pid" 30; do
    now=$(find "$GOCACHE" -type f 2>/dev/null | wc -l)
    say "$what: still compiling ($((SECONDS - t0))s, $((now - before)) new build cache entries)"
  done
  wait "$pid" || rc=$?
  return $rc
}
# wait_timeout PID SECONDS: true once PID has exited, false after SECONDS.
wait_timeout() {
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.2
  done
  return 1
}
