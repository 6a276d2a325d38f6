# Sourced by the build scripts: version_ldflags VERSION prints the -ldflags that
# stamp a Kubernetes binary with its release, as the upstream release build
# does, so /version, `kubectl version` and `--version` report it rather than
# v0.0.0-master.
version_ldflags() {
  local version=$1 minor pkg ldflags="-s -w"
  minor=${version#v1.}; minor=${minor%%.*}
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  echo "$ldflags"
}
