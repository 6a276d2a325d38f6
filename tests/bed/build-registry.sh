#!/usr/bin/env bash
# Builds the CNCF Distribution registry (the `registry` program of the Go module
# github.com/distribution/distribution/v3) into
#   ${PYKUBELET_CACHE:-/var/cache/pykubelet}/registry/$REGISTRY_VERSION/registry
# The private registry of the image pull tests (tests/cluster/test_pull_secrets.py): basic auth
# from an htpasswd file, plain HTTP on loopback (containerd talks HTTP to a loopback registry).
# Idempotent: a second run is a no-op; the first takes a few minutes on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REGISTRY_VERSION=${REGISTRY_VERSION:-v3.1.2}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/registry/$REGISTRY_VERSION
say() { echo "[build-registry $(date +%T)] $*"; }

built() { [[ -x $OUT/registry ]]; }
if built; then echo "registry $REGISTRY_VERSION already built in $OUT"; exit 0; fi
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9
if built; then echo "registry $REGISTRY_VERSION already built in $OUT"; exit 0; fi

source "$here/k8s-module.sh"
k8s_go_env

src=$OUT/src
rm -rf "$src"
mkdir -p "$src"
cd "$src"
module=github.com/distribution/distribution/v3
go mod init pykubelet.local/registry-build >/dev/null 2>&1
printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/registry"\n' "$module" >tools.go
t0=$SECONDS
say "resolving $module@$REGISTRY_VERSION"
go get "$module@$REGISTRY_VERSION"
go mod tidy
say "building registry (a few minutes on 2 cores)"
CGO_ENABLED=0 run_with_progress registry go build -p 2 -trimpath -o "$OUT/.registry.new" "$module/cmd/registry"
mv -f "$OUT/.registry.new" "$OUT/registry"
cd "$OUT" && rm -rf "$src"
say "built registry in $((SECONDS - t0))s: $("$OUT/registry" --version)"
