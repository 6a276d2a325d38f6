#!/usr/bin/env bash
# kind's default storage for the node images (build-kind-node.sh runs this first): what kind's
# node-image build puts in /kind/manifests/default-storage.yaml and the two images it runs,
# cached under ${PYKUBELET_CACHE:-/var/cache/pykubelet}/kind:
#
#   local-path-provisioner  the github.com/rancher/local-path-provisioner module at $LPP_VERSION,
#                           built as its scripts/build builds it (static, main.VERSION set),
#                           into .../kind/node-bin/local-path-provisioner. kind v0.33.0's image
#                           is v0.0.34; the module proxy serves only v0.0.30, whose command line
#                           and config (what kind's manifest uses) are the same.
#   manifest and images     tests/bed/images_kind.py: kind's manifest, read from the kind
#                           module's source, to .../kind/default-storage.yaml; the provisioner
#                           and helper images under the names it gives them, as OCI tars in
#                           .../kind/images (keyed on their contents)
#
# Prints the manifest's path last. Idempotent: with nothing changed it builds nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/k8s-module.sh"
KIND_VERSION=${KIND_VERSION:-v0.33.0}
LPP_VERSION=${LPP_VERSION:-v0.0.30}
LPP_MODULE=github.com/rancher/local-path-provisioner
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/kind
LPP_DIR=$OUT/node-bin/local-path-provisioner
MANIFEST=$OUT/default-storage.yaml
say() { echo "[build-kind-storage $(date +%T)] $*" >&2; }

k8s_go_env
mkdir -p "$LPP_DIR"
exec 9>"$OUT/.lock-storage"
flock 9
if [[ ! -x $LPP_DIR/local-path-provisioner || $(cat "$LPP_DIR/.stamp" 2>/dev/null) != "$LPP_VERSION" ]]; then
    say "building local-path-provisioner $LPP_VERSION from $LPP_MODULE (kind pins a later release the module proxy does not serve)"
    GOBIN=$LPP_DIR CGO_ENABLED=0 nice -n 10 go install -trimpath -ldflags "-s -w -X main.VERSION=$LPP_VERSION" \
        "$LPP_MODULE@$LPP_VERSION"
    echo "$LPP_VERSION" >"$LPP_DIR/.stamp"
fi
kind_module=$(go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $kind_module ]] || { say "ERROR: no source of sigs.k8s.io/kind@$KIND_VERSION in the module cache"; exit 1; }
python3 "$here/images_kind.py" --kind-module "$kind_module" --provisioner "$LPP_DIR/local-path-provisioner" \
    --manifest "$MANIFEST" --cache "$CACHE" >&2
echo "$MANIFEST"
