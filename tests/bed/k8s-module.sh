# Sourced by build-control-plane.sh and build-conformance.sh: what building programs of one
# Kubernetes release from its published Go modules takes, the same for every build.
#
# k8s.io/kubernetes points every k8s.io/<staging> module at ./staging/src through replace
# directives, which Go ignores in a dependency; a throwaway module that requires it mirrors each
# of them with the published v0.X.Y of the same release.

# k8s_go_env: the Go toolchain and caches every build uses. The module and build caches live
# under $CACHE/go, shared by the builds, so a later build (or a new patch release) reuses most of
# the work; TAGS are what Kubernetes' own build (hack/lib/golang.sh) uses for release binaries.
k8s_go_env() {
  command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
  export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
  export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local GOWORK=off
  TAGS=selinux,notest,grpcnotrace
}

# module_go_directive MODULE@VERSION: the `go` directive of that published module's go.mod (a
# module built from ours needs at least the Go language version its dependency declares).
module_go_directive() {
  local gomod
  gomod=$(go mod download -json "$1" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  [[ -f $gomod ]] || { echo "cannot find go.mod of $1" >&2; return 1; }
  awk '$1 == "go" {print $2; exit}' "$gomod"
}

# k8s_module NAME: write go.mod in the current directory for module NAME, requiring
# k8s.io/kubernetes $K8S_VERSION with its staging modules replaced; sets k8s_dir (its source).
k8s_module() {
  local mod_json k8s_gomod staging_version
  mod_json=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION")
  k8s_gomod=$(sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p' <<<"$mod_json")
  k8s_dir=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$mod_json")
  [[ -f $k8s_gomod ]] || { echo "cannot find go.mod of k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }
  staging_version=v0.${K8S_VERSION#v1.}
  {
    echo "module $1"
    echo
    echo "go $(awk '$1 == "go" {print $2; exit}' "$k8s_gomod")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's|^\s*\(k8s\.io/[^ ]*\) => \./staging/src/.*$|\t\1 => \1 '"$staging_version"'|p' "$k8s_gomod"
    echo ")"
  } >go.mod
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
