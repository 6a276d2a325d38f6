#!/usr/bin/env bash
# `make addons`: the add-ons a kubeadm cluster runs, built from their published Go modules (no
# container registry is reachable here), packed as images under the names their manifests and
# kubeadm use, imported into containerd, and their manifests written to build/addons/:
#
#   CoreDNS         the version kubeadm $K8S_VERSION installs (read from `kubeadm config images list`)
#   kube-proxy      $K8S_VERSION (build-kube-proxy.sh), on a Debian netfilter userland
#   flannel         flanneld and install-conf of $FLANNEL_VERSION, and the flannel CNI plugin
#   metrics-server  $METRICS_SERVER_VERSION
#   pykubelet       this tree (wheelhouse.py's wheels), for the pykubelet-proxy DaemonSet
#   CSI hostpath    csi-driver-host-path's hostpathplugin and the sidecars it deploys with
#                   (node-driver-registrar, livenessprobe, external-attacher, external-provisioner),
#                   and build/addons/csi-hostpath.yaml (images_addons_csi.py)
#
# The programs go to ${PYKUBELET_CACHE:-/var/cache/pykubelet}/addons/bin (Go's module and build
# caches are k8s-module.sh's), the image tars to .../addons/images; images_addons.py packs and
# imports them and writes the manifests. Idempotent: a second run checks its stamps and the
# images' digests in containerd and does nothing else. Options are images_addons.py's, passed to
# images_addons_csi.py too (--no-import: build everything, import nothing).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/k8s-module.sh"
K8S_VERSION=${K8S_VERSION:-v1.36.3}
# The newest flannel release; its kube-flannel.yml names the CNI plugin image it runs.
FLANNEL_VERSION=${FLANNEL_VERSION:-v0.28.10}
METRICS_SERVER_VERSION=${METRICS_SERVER_VERSION:-v0.8.0}
# The Go module proxy serves no version of github.com/flannel-io/cni-plugin, so the flannel CNI
# plugin is built from the module it was forked from, where it lived until v1.0.0: same
# subnet.env contract, same bridge/host-local delegation.
FLANNEL_CNI_MODULE=${FLANNEL_CNI_MODULE:-github.com/containernetworking/plugins@v0.9.1}
# The CSI hostpath driver and its sidecars at the tags csi-driver-host-path v1.18.0's manifests
# (deploy/kubernetes-1.34) run them: "NAME TAG MODULE@VERSION PACKAGE". node-driver-registrar and
# livenessprobe tag v2 releases of modules whose path has no /v2, so those tags are no Go module
# versions; the commits they tag are.
CSI_PROGRAMS=(
  "hostpathplugin v1.17.1 github.com/kubernetes-csi/csi-driver-host-path@v1.17.1 github.com/kubernetes-csi/csi-driver-host-path/cmd/hostpathplugin"
  "csi-node-driver-registrar v2.17.0 github.com/kubernetes-csi/node-driver-registrar@c5794c45f34ce9c62e47dfd5a2b073c3824f2c79 github.com/kubernetes-csi/node-driver-registrar/cmd/csi-node-driver-registrar"
  "livenessprobe v2.19.0 github.com/kubernetes-csi/livenessprobe@d2d15a5e8217cc9f8680821ee649b6a051b38d96 github.com/kubernetes-csi/livenessprobe/cmd/livenessprobe"
  "csi-attacher v4.12.0 github.com/kubernetes-csi/external-attacher/v4@v4.12.0 github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
  "csi-provisioner v6.3.0 github.com/kubernetes-csi/external-provisioner/v6@v6.3.0 github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
)
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/addons
BIN=$OUT/bin
say() { echo "[build-addons $(date +%T)] $*"; }

# The control plane (kubeadm names the images; kubectl renders metrics-server's manifest) and
# kube-proxy: their own cached builds, no-ops when done.
bash "$here/build-control-plane.sh"
bash "$here/build-kube-proxy.sh"
KUBEADM=$CACHE/k8s/$K8S_VERSION/bin/kubeadm
coredns_image=$("$KUBEADM" config images list --kubernetes-version "$K8S_VERSION" | grep '/coredns:')
COREDNS_VERSION=${coredns_image##*:}

mkdir -p "$BIN"
exec 9>"$OUT/.lock"  # two first runs at once would build everything twice
flock 9
k8s_go_env
mkdir -p "$GOCACHE"  # run_with_progress counts its files: on a new machine it does not exist yet

# build NAME CGO LDFLAGS MODULE@VERSION PACKAGE [REPLACE...]: one program into $BIN/NAME, skipped
# when its stamp says it is built. Without REPLACE: `go install PACKAGE@VERSION`, which builds the
# published module with its own go.mod as the main module, so with exactly the dependency versions
# its release was tested with. A REPLACE ("PATH => PATH VERSION": a dependency the module proxy
# does not serve, swapped for a version it does) needs a main module of our own: a throwaway one
# in $OUT/src/NAME that requires MODULE and adds those replace directives; every other version is
# still the release's (Go's minimal version selection over MODULE's own requirements).
build() {
  local name=$1 cgo=$2 ldflags=$3 module=$4 pkg=$5 t0=$SECONDS tmp r
  shift 5
  local want="$module $pkg cgo=$cgo ldflags=$ldflags replace=$*" stamp=$BIN/.stamp-$name
  if [[ -x $BIN/$name && -f $stamp && $(<"$stamp") == "$want" ]]; then return 0; fi
  say "building $name ($pkg of $module; minutes on 2 cores on a cold Go cache)"
  if (($#)); then
    mkdir -p "$OUT/src/$name"
    {
      echo "module pykubelet.local/$name-build"
      echo
      echo "go $(go_directive "$(module_gomod "$module")")"
      echo
      echo "require ${module%@*} ${module#*@}"
      for r in "$@"; do echo; echo "replace $r"; done
    } >"$OUT/src/$name/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$OUT/src/$name/tools.go"
    (cd "$OUT/src/$name" && go mod tidy &&
      CGO_ENABLED=$cgo run_with_progress "$name" go build -trimpath -ldflags "$ldflags" -o "$BIN/.$name.new" "$pkg")
  else
    tmp=$(mktemp -d "$OUT/.gobin.XXXXXX")
    # shellcheck disable=SC2064  # expand now: the directory of this call
    trap "rm -rf '$tmp'" EXIT
    GOBIN=$tmp CGO_ENABLED=$cgo run_with_progress "$name" go install -trimpath -ldflags "$ldflags" "$pkg@${module#*@}"
    mv -f "$tmp"/* "$BIN/.$name.new"
    rm -rf "$tmp"
    trap - EXIT
  fi
  mv -f "$BIN/.$name.new" "$BIN/$name"
  echo "$want" >"$stamp"
  say "built $name in $((SECONDS - t0))s"
}

# What each project's own Makefile passes (version stamped in; static unless said). The commits
# stamped in are the ones the module proxy recorded for the tags.
coredns=github.com/coredns/coredns@$COREDNS_VERSION
coredns_commit=$(go mod download -json "$coredns" | sed -n 's/^\t\t"Hash": "\(.*\)",\{0,1\}$/\1/p')
build coredns 0 "-s -w -X github.com/coredns/coredns/coremain.GitCommit=${coredns_commit:0:7}" \
  "$coredns" github.com/coredns/coredns
# flannel's tencentvpc backend asks for an SDK version the module proxy does not serve; the one
# it does serve builds (that backend only runs on Tencent Cloud). Upstream links flanneld with cgo
# on amd64 (its UDP backend needs it), statically against musl; here dynamically against glibc,
# which the image's Debian userland carries.
flannel=github.com/flannel-io/flannel@$FLANNEL_VERSION
tencent_vpc=github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc
build flanneld 1 "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" \
  "$flannel" github.com/flannel-io/flannel "$tencent_vpc => $tencent_vpc v1.1.0"
build install-conf 0 "" "$flannel" github.com/flannel-io/flannel/cmd/install_conf "$tencent_vpc => $tencent_vpc v1.1.0"
build flannel 0 "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${FLANNEL_CNI_MODULE#*@}" \
  "$FLANNEL_CNI_MODULE" "${FLANNEL_CNI_MODULE%@*}/plugins/meta/flannel"
metrics_server=sigs.k8s.io/metrics-server@$METRICS_SERVER_VERSION
metrics_commit=$(go mod download -json "$metrics_server" | sed -n 's/^\t\t"Hash": "\(.*\)",\{0,1\}$/\1/p')
build metrics-server 0 \
  "-w -X k8s.io/client-go/pkg/version.gitVersion=$METRICS_SERVER_VERSION -X k8s.io/client-go/pkg/version.gitCommit=$metrics_commit" \
  "$metrics_server" sigs.k8s.io/metrics-server/cmd/metrics-server

# module_replaces MODULE@VERSION: the replace directives of that module's own go.mod ("PATH =>
# PATH VERSION", one a line), single or in a block. `go install PKG@VERSION` refuses a module that
# has any, so build() mirrors them in its throwaway main module.
module_replaces() {
  awk '/^replace \($/ {block = 1; next} block && /^\)/ {block = 0; next}
       block && NF {sub(/^[ \t]+/, ""); print; next} /^replace / {sub(/^replace /, ""); print}' "$(module_gomod "$1")"
}

# The CSI programs, each as its project's release-tools build.make builds it: static (cgo off),
# main.version stamped in. One the Go module proxy does not serve is said and left out; its image
# is then missing, and the StatefulSet in csi-hostpath.yaml cannot start on a node without it.
# Only with PYKUBELET_ADDONS_CSI=1 (`make addons-csi`): the proxy does not serve the driver itself
# (csi-driver-host-path), its registrar or livenessprobe, so nothing can run these yet, and the two
# sidecars it does serve cost about 12 minutes of cold Go builds.
csi_tags=() csi_rbac_modules=()
WITH_CSI=${PYKUBELET_ADDONS_CSI:-0}
[[ $WITH_CSI == 1 ]] || CSI_PROGRAMS=()
for entry in "${CSI_PROGRAMS[@]}"; do
  read -r name tag module pkg <<<"$entry"
  csi_tags+=("$name=$tag")
  if ! err=$(go mod download "$module" 2>&1); then
    err=${err##*$'\n'}  # its last line: the proxy's answer
    say "not building $name $tag: the Go module proxy does not serve $module (${err#"${err%%[![:space:]]*}"}); registry.k8s.io/sig-storage/$name:$tag stays missing"
    continue
  fi
  mapfile -t replaces < <(module_replaces "$module")
  build "$name" 0 "-X main.version=$tag" "$module" "$pkg" "${replaces[@]}"
  # The sidecars whose RBAC the manifest takes from their module.
  case $name in csi-attacher | csi-provisioner) csi_rbac_modules+=("$module") ;; esac
done

# Where the manifests and the files the images carry come from: the modules' source.
module_dir() { go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }
export ADDONS_FLANNEL_SOURCE ADDONS_METRICS_SERVER_SOURCE ADDONS_KUBEADM=$KUBEADM
export ADDONS_FLANNEL_MODULE=$flannel ADDONS_METRICS_SERVER_MODULE=$metrics_server
ADDONS_FLANNEL_SOURCE=$(module_dir "$ADDONS_FLANNEL_MODULE")
ADDONS_METRICS_SERVER_SOURCE=$(module_dir "$ADDONS_METRICS_SERVER_MODULE")
python3 "$here/images_addons.py" --cache "$CACHE" --manifests "$repo/build/addons" "$@"

[[ $WITH_CSI == 1 ]] || exit 0
export ADDONS_K8S_MODULE=k8s.io/kubernetes@$K8S_VERSION ADDONS_K8S_SOURCE ADDONS_CSI_TAGS="${csi_tags[*]}"
export ADDONS_CSI_RBAC_MODULES="${csi_rbac_modules[*]}" ADDONS_CSI_RBAC_SOURCES=""
ADDONS_K8S_SOURCE=$(k8s_source_dir)
for module in "${csi_rbac_modules[@]}"; do ADDONS_CSI_RBAC_SOURCES+="$(module_dir "$module") "; done
python3 "$here/images_addons_csi.py" --cache "$CACHE" --manifests "$repo/build/addons" "$@"
