#!/usr/bin/env bash
# `make kind` (its second part): kind's node images for Kubernetes $K8S_VERSION, made from the base
# image build-kind.sh built, without `kind build node-image` (which needs a Kubernetes source tree
# or release tarball and pulls every image it does not build from a registry). Done as kind's
# node-image build does it (pkg/build/nodeimage), by hand:
#
#   a build container of the base (`sleep infinity`, seccomp unconfined, not privileged)
#   kubeadm, kubelet, kubectl    .../k8s/$K8S_VERSION/bin (build-control-plane.sh) -> /usr/bin
#   /kind/version                $K8S_VERSION (kind derives kubernetesVersion and its kubeadm
#                                config's API version from it)
#   images                       what `kubeadm config images list` names, plus the CNI's, imported
#                                into the node's containerd (namespace k8s.io) as kind does:
#                                pinned, all platforms, not unpacked; from the test bed's OCI tars
#                                (build-control-plane.sh, `make addons`, build-kind-storage.sh)
#                                in $CACHE/images, $CACHE/addons/images and $CACHE/kind/images,
#                                each found by the name it carries
#   sandbox image                the base's containerd config names kind's pause:3.10; the node
#                                gets kubeadm's pause:3.10.2, the one built here
#   /kind/manifests/default-cni.yaml
#                                kind's kindnetd cannot be built here (the module proxy does not
#                                serve sigs.k8s.io/kind/images/kindnetd), so flannel takes its
#                                place: `make addons`'s kube-flannel.yml (its 10.244.0.0/16 is
#                                kind's default pod subnet), its images, and the CNI bridge plugin
#                                flannel delegates to (built from the module of the base's plugins)
#   /kind/manifests/default-storage.yaml
#                                kind's own: local-path-provisioner as the default StorageClass
#                                "standard", its images built by build-kind-storage.sh (the
#                                provisioner from its module, v0.0.30 where kind has v0.0.34)
#   `docker commit` with kind's entrypoint                          -> kindest/node:$K8S_VERSION
#
# and from that image, pykubelet in place of the kubelet: Debian's python3 and python3-venv
# (apt, in a container on the host's network), the real kubelet removed, and systemd/install.sh
# install (`make install`) from a wheelhouse of this tree              -> pykubelet/kind-node:$K8S_VERSION
# kind's kubelet.service and drop-ins in /etc/systemd/system stay in force over the copies
# install.sh puts in /usr/local/lib/systemd/system, so both images run /usr/bin/kubelet the same way;
# /etc/default/kubelet adds --network-mode=runtime (the CNI DaemonSet owns the pod network).
#
# Each image carries a key of what it is made of; a rerun with nothing changed does nothing.
# Usage: build-kind-node.sh [real|pykubelet|both]   (default both)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/k8s-module.sh"
KIND_VERSION=${KIND_VERSION:-v0.33.0}
K8S_VERSION=${K8S_VERSION:-v1.36.3}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/kind
DOCKER=/usr/bin/docker
BASE_IMAGE=pykubelet/kind-base:$KIND_VERSION-bookworm
REAL_IMAGE=kindest/node:$K8S_VERSION
PYKUBELET_IMAGE=pykubelet/kind-node:$K8S_VERSION
KEY_LABEL=io.pykubelet.kind-node.key
K8S_BIN=$CACHE/k8s/$K8S_VERSION/bin
CNI_MANIFEST=${KIND_CNI_MANIFEST:-$repo/build/addons/kube-flannel.yml}
CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
SANDBOX_IMAGE=registry.k8s.io/pause:3.10.2
BUILD=pykubelet-kind-node-build
which=${1:-both}
case $which in real | pykubelet | both) ;; *) echo "usage: $0 [real|pykubelet|both]" >&2; exit 2 ;; esac
say() { echo "[build-kind-node $(date +%T)] $*"; }
die() { say "ERROR: $*" >&2; exit 1; }

image_key() { "$DOCKER" image inspect --format "{{index .Config.Labels \"$KEY_LABEL\"}}" "$1" 2>/dev/null || true; }

# The images the node needs: kubeadm's list (its pause swapped for the sandbox image, as kind does)
# and those the CNI and storage manifests run.
wanted_images() {
    { "$K8S_BIN/kubeadm" config images list --kubernetes-version "$K8S_VERSION" | grep -v /pause:
      echo "$SANDBOX_IMAGE"
      sed -n 's/^ *image: *\([^ ]*\) *$/\1/p' "$CNI_MANIFEST" "$STORAGE_MANIFEST"; } | sort -u
}

# image_tar REF: the newest OCI tar in the test bed's caches whose index names REF.
image_tar() {
    local tar
    # shellcheck disable=SC2045  # newest first; the names are the bed's own, without blanks
    for tar in $(ls -t "$CACHE"/images/*.tar "$CACHE"/addons/images/*.tar "$OUT"/images/*.tar 2>/dev/null); do
        if tar -xOf "$tar" index.json 2>/dev/null |
            jq -e --arg ref "$1" '.manifests[] | select(.annotations["io.containerd.image.name"] == $ref)' >/dev/null; then
            echo "$tar"; return 0
        fi
    done
    return 1
}

# The bridge plugin flannel delegates to, from the same module as the base's CNI plugins.
bridge_plugin() {
    local dir=$OUT/node-bin/cni-flannel
    if [[ ! -x $dir/bridge || $(cat "$dir/.stamp" 2>/dev/null) != "$CNI_PLUGINS_VERSION" ]]; then
        mkdir -p "$dir"
        say "building the CNI bridge plugin $CNI_PLUGINS_VERSION" >&2
        GOBIN=$dir CGO_ENABLED=0 go install -trimpath \
            -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
            "github.com/containernetworking/plugins/plugins/main/bridge@$CNI_PLUGINS_VERSION"
        echo "$CNI_PLUGINS_VERSION" >"$dir/.stamp"
    fi
    echo "$dir/bridge"
}

remove_build_container() { "$DOCKER" rm --force --volumes "$BUILD" >/dev/null 2>&1 || true; }

# commit TAG KEY: the build container as TAG, with kind's entrypoint and nothing of `sleep` left.
commit() {
    "$DOCKER" commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
        --change "LABEL $KEY_LABEL=$2" "$BUILD" "$1" >/dev/null
    remove_build_container
    # The image this one replaces, untagged now (only images carrying our label are looked at).
    "$DOCKER" image prune --force --filter "label=$KEY_LABEL" >/dev/null
    say "$1: $("$DOCKER" image inspect --format '{{.Id}} {{.Size}} bytes' "$1")"
}

# node_exec CMD...: CMD in the build container.
node_exec() { "$DOCKER" exec "$BUILD" "$@"; }

build_real() {
    local key=$1 t0=$SECONDS ref tar bridge pid errors
    declare -A tars=()
    for ref in $(wanted_images); do
        tar=$(image_tar "$ref") || die "no image tar names $ref (make control-plane addons builds them)"
        tars[$ref]=$tar
    done
    bridge=$(bridge_plugin)
    remove_build_container
    "$DOCKER" run --detach --name "$BUILD" --security-opt seccomp=unconfined --entrypoint sleep \
        "$BASE_IMAGE" infinity >/dev/null
    for b in kubeadm kubelet kubectl; do "$DOCKER" cp "$K8S_BIN/$b" "$BUILD:/usr/bin/$b"; done
    node_exec chown root:root /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl
    node_exec chmod 0755 /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl
    node_exec sh -c "echo '$K8S_VERSION' >/kind/version"
    node_exec sed -i "s|^\(\s*sandbox_image = \).*|\1\"$SANDBOX_IMAGE\"|" /etc/containerd/config.toml
    node_exec mkdir -p /kind/manifests
    "$DOCKER" cp "$CNI_MANIFEST" "$BUILD:/kind/manifests/default-cni.yaml"
    "$DOCKER" cp "$STORAGE_MANIFEST" "$BUILD:/kind/manifests/default-storage.yaml"
    "$DOCKER" cp "$bridge" "$BUILD:/opt/cni/bin/bridge"
    node_exec chown root:root /kind/manifests/default-cni.yaml /kind/manifests/default-storage.yaml
    node_exec chmod 0644 /kind/manifests/default-cni.yaml /kind/manifests/default-storage.yaml
    # containerd in the build container, for the import only (kind's imageimporter).
    pid=$(node_exec sh -c 'containerd >/tmp/containerd.log 2>&1 & echo $!')
    for _ in $(seq 100); do node_exec ctr info >/dev/null 2>&1 && break; sleep 0.2; done
    node_exec ctr info >/dev/null 2>&1 || { node_exec tail -n 20 /tmp/containerd.log >&2; die "containerd did not start in the build container"; }
    for ref in "${!tars[@]}"; do
        say "importing $ref ($(basename "${tars[$ref]}"))"
        # Its only output on success is containerd's cgroup v1 deprecation warning.
        errors=$("$DOCKER" exec -i "$BUILD" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
            --all-platforms --no-unpack - <"${tars[$ref]}" 2>&1 >/dev/null) || die "importing $ref failed: $errors"
    done
    node_exec ctr --namespace=k8s.io images ls -q | grep -v '^sha256:' | sed 's/^/  /'
    # Stopped before the commit, so its store is whole; `sleep`, PID 1 here, never reaps it: a
    # zombie is a stopped containerd.
    node_exec kill "$pid"
    while node_exec sh -c "[ -e /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status"; do sleep 0.2; done
    node_exec rm -f /tmp/containerd.log
    commit "$REAL_IMAGE" "$key"
    say "$REAL_IMAGE built in $((SECONDS - t0))s"
}

build_pykubelet() {
    local key=$1 t0=$SECONDS wheels
    # The dependencies' wheels the test bed already has spare the package index a visit.
    mkdir -p "$OUT/wheels"
    find "$CACHE/wheels" -maxdepth 1 -name '*.whl' ! -name 'pykubelet-*' -exec cp -n -t "$OUT/wheels" {} + 2>/dev/null || true
    wheels=$(python3 "$here/wheelhouse.py" --dir "$OUT/wheels" | tail -n 1)
    remove_build_container
    # The host's network: apt reaches Debian's mirror (dockerd here has no bridge of its own).
    "$DOCKER" run --detach --name "$BUILD" --network host --security-opt seccomp=unconfined --entrypoint sleep \
        "$REAL_IMAGE" infinity >/dev/null
    say "python3 and python3-venv from Debian into the node"
    node_exec sh -c 'DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3 python3-venv >/dev/null &&
        rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /usr/share/doc/* /usr/share/man/*'
    node_exec rm -f /usr/bin/kubelet
    node_exec mkdir -p /tmp/pykubelet/wheels
    "$DOCKER" cp "$repo/systemd" "$BUILD:/tmp/pykubelet/systemd"
    for w in "$wheels"/*.whl; do "$DOCKER" cp "$w" "$BUILD:/tmp/pykubelet/wheels/"; done
    node_exec env PYKUBELET_WHEELS=/tmp/pykubelet/wheels bash /tmp/pykubelet/systemd/install.sh install
    node_exec rm -rf /tmp/pykubelet /root/.cache
    # kind's default CNI is a DaemonSet (flannel here, kindnetd in kind's own images) whose config
    # containerd runs: pykubelet leaves the pod network to it (docs/network.md), through kind's own
    # place for the kubelet's extra flags.
    node_exec sed -i 's|^KUBELET_EXTRA_ARGS=\(.*\)$|KUBELET_EXTRA_ARGS=\1 --network-mode=runtime|' /etc/default/kubelet
    node_exec grep -q -- '--network-mode=runtime' /etc/default/kubelet || die "kind's /etc/default/kubelet has no KUBELET_EXTRA_ARGS line"
    commit "$PYKUBELET_IMAGE" "$key"
    say "$PYKUBELET_IMAGE built in $((SECONDS - t0))s"
}

k8s_go_env
STORAGE_MANIFEST=$(bash "$here/build-kind-storage.sh")
# kubeadm's images as OCI tars (built once, cached): on a new machine nothing else has made them yet.
python3 "$here/images_control_plane.py" --no-import --cache "$CACHE" >&2
"$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1 || die "no $BASE_IMAGE: run tests/bed/build-kind.sh first"
[ -f "$CNI_MANIFEST" ] || die "no $CNI_MANIFEST (make addons writes it; KIND_CNI_MANIFEST names another)"
for b in kubeadm kubelet kubectl; do [ -x "$K8S_BIN/$b" ] || die "no $K8S_BIN/$b (make control-plane builds it)"; done
exec 9>"$OUT/.lock-node"
flock 9
trap remove_build_container EXIT
real_key=$({ "$DOCKER" image inspect --format '{{.Id}}' "$BASE_IMAGE"; sha256sum "$K8S_BIN"/{kubeadm,kubelet,kubectl} "$CNI_MANIFEST" "$STORAGE_MANIFEST" | cut -d' ' -f1
    declare -f build_real commit wanted_images; echo "$SANDBOX_IMAGE $CNI_PLUGINS_VERSION"
    for ref in $(wanted_images); do tar=$(image_tar "$ref") || die "no image tar names $ref"; ls -l "$tar"; done
    } | sha256sum | cut -c1-12)
if [[ $which != pykubelet && $(image_key "$REAL_IMAGE") != "$real_key" ]]; then build_real "$real_key"; fi
if [[ $which != real ]]; then
    # The tree as it is (the wheel is built from it), not its last commit.
    py_key=$({ "$DOCKER" image inspect --format '{{.Id}}' "$REAL_IMAGE"; declare -f build_pykubelet
        cd "$repo" && find pykubelet systemd pyproject.toml -type f ! -name '*.pyc' -print0 | sort -z |
            xargs -0 sha256sum; } | sha256sum | cut -c1-12)
    if [[ $(image_key "$PYKUBELET_IMAGE") != "$py_key" ]]; then build_pykubelet "$py_key"; fi
fi
say "node images: $("$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^($REAL_IMAGE|$PYKUBELET_IMAGE) " | tr '\n' ' ')"
