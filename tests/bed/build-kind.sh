#!/usr/bin/env bash
# `make kind` (its first part; build-kind-node.sh makes the node images from what this builds):
# what running kind on this machine takes, from Debian's packages
# and Go modules (no container registry is reachable here), cached under
# ${PYKUBELET_CACHE:-/var/cache/pykubelet}/kind:
#
#   Docker      Debian's docker.io (installed if missing), its daemon started by docker.sh
#               (`tests/bed/docker.sh stop` stops it)
#   kind        the sigs.k8s.io/kind module at $KIND_VERSION, built as kind's Makefile builds it,
#               into .../kind/bin/kind
#   node tools  what kind's Dockerfile builds in its later stages, from the module proxy:
#               crictl (sigs.k8s.io/cri-tools $CRICTL_VERSION) and the CNI plugins kind ships
#               (host-local, loopback, ptp, portmap; github.com/containernetworking/plugins
#               $CNI_PLUGINS_VERSION), static, into .../kind/node-bin
#   base image  kind's base image ($KIND_VERSION's images/base) rebuilt from Debian 12 (bookworm)
#               packages: mmdebstrap makes the root filesystem with the packages kind's Dockerfile
#               installs (and Debian's runc), kind-base-rootfs.sh lays kind's files and systemd
#               setup into it, with containerd (`make containerd2`'s build), crictl and the CNI
#               plugins where kind's image has them, and
#               `docker import` plus the Dockerfile's metadata (container=docker, SIGRTMIN+3 stops
#               it, kind's entrypoint then /sbin/init) make it $BASE_IMAGE. kind's own base is Debian
#               13 now, whose systemd (257) refuses to boot on cgroup v1, which this machine runs;
#               Debian 12's systemd 252 does (kind's base was bookworm until kind v0.31).
#
# Versions that differ from kind's pins: crictl v1.37.0 (kind: v1.36.0, which the module proxy does
# not serve), containerd v2.4.2 (kind: v2.3.4; the one the test bed builds), runc 1.1.5 (Debian's;
# kind builds v1.4.3). Left out: containerd-fuse-overlayfs-grpc, which only rootless nodes use.
#
# After a (re)build of the base image, and with --check-boot, a node container of it is started
# as kind starts its nodes and must reach systemd's "running" state with containerd answering
# crictl, then it is removed.
#
# Idempotent: a second run checks the stamps and the image's label and does nothing else.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/k8s-module.sh"
KIND_VERSION=${KIND_VERSION:-v0.33.0}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/kind
BIN=$OUT/bin
DOCKER=/usr/bin/docker
BASE_IMAGE=pykubelet/kind-base:$KIND_VERSION-bookworm
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
CNI_PLUGINS=(ipam/host-local main/loopback main/ptp meta/portmap)
TOOLS=$OUT/node-bin
BASE_LABEL=io.pykubelet.kind-base.key
# kind's Dockerfile, line by line: systemd | Kubernetes | networked storage | storage e2e tests |
# the container runtime | kind itself | semi-core Kubernetes functionality.
BASE_PACKAGES=(systemd
    conntrack iptables nftables iproute2 ethtool util-linux mount kmod
    libseccomp2 pigz fuse-overlayfs
    nfs-common open-iscsi
    e2fsprogs
    bash ca-certificates curl jq procps
    runc)
# Its `apt-get upgrade`: the point release plus the updates and security suites.
BASE_MIRRORS=("deb http://deb.debian.org/debian bookworm main"
    "deb http://deb.debian.org/debian bookworm-updates main"
    "deb http://deb.debian.org/debian-security bookworm-security main")
check_boot=
for arg in "$@"; do
    case $arg in
        --check-boot) check_boot=1 ;;
        *) echo "usage: $0 [--check-boot]" >&2; exit 2 ;;
    esac
done
say() { echo "[build-kind $(date +%T)] $*"; }

# --------------------------------------------------------------------- packages
# policy-rc.d 101 (as setup.sh does): docker.io's postinst must not start a daemon of its own.
install_packages() {
    local p missing=() policy=/usr/sbin/policy-rc.d added_policy='' rc=0
    for p in "$@"; do
        [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" = installed ] || missing+=("$p")
    done
    [ "${#missing[@]}" -gt 0 ] || return 0
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 0755 "$policy"; added_policy=1
    fi
    apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
    if [ -n "$added_policy" ]; then rm -f "$policy"; fi
    [ "$rc" -eq 0 ] || { say "apt-get install failed (rc=$rc)"; exit 1; }
}

# ------------------------------------------------------------------------- kind
# kind's Makefile: CGO off, -trimpath, -buildid= -s -w, the commit stamped in (the one the module
# proxy recorded for the tag).
build_kind() {
    local module=sigs.k8s.io/kind@$KIND_VERSION stamp=$BIN/.stamp-kind t0=$SECONDS tmp commit
    if [[ -x $BIN/kind && -f $stamp && $(<"$stamp") == "$module" ]]; then return 0; fi
    say "building kind ($module; a minute or two on 2 cores on a cold Go cache)"
    commit=$(go mod download -json "$module" | sed -n 's/^\t\t"Hash": "\(.*\)",\{0,1\}$/\1/p')
    tmp=$(mktemp -d "$OUT/.gobin.XXXXXX")
    # shellcheck disable=SC2064  # expand now: the directory of this call
    trap "rm -rf '$tmp'" EXIT
    GOBIN=$tmp CGO_ENABLED=0 run_with_progress kind go install -trimpath \
        -ldflags "-buildid= -s -w -X=sigs.k8s.io/kind/pkg/cmd/kind/version.gitCommit=$commit" "$module"
    mv -f "$tmp/kind" "$BIN/kind"
    rm -rf "$tmp"
    trap - EXIT
    echo "$module" >"$stamp"
    say "built $("$BIN/kind" version) in $((SECONDS - t0))s"
}

# ------------------------------------------------------------------- node tools
# Static (CGO off), as kind's Dockerfile builds them, their versions stamped in.
build_node_tools() {
    local stamp=$TOOLS/.stamp want t0=$SECONDS plugin packages=()
    want="sigs.k8s.io/cri-tools@$CRICTL_VERSION github.com/containernetworking/plugins@$CNI_PLUGINS_VERSION ${CNI_PLUGINS[*]}"
    if [[ -f $stamp && $(<"$stamp") == "$want" ]]; then return 0; fi
    mkdir -p "$TOOLS/cni"
    say "building crictl $CRICTL_VERSION and the CNI plugins $CNI_PLUGINS_VERSION (minutes on a cold Go cache)"
    GOBIN=$TOOLS CGO_ENABLED=0 run_with_progress crictl go install -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}" \
        "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
    for plugin in "${CNI_PLUGINS[@]}"; do
        packages+=("github.com/containernetworking/plugins/plugins/$plugin@$CNI_PLUGINS_VERSION")
    done
    GOBIN=$TOOLS/cni CGO_ENABLED=0 run_with_progress "CNI plugins" go install -trimpath \
        -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
        "${packages[@]}"
    echo "$want" >"$stamp"
    say "built $("$TOOLS/crictl" --version) and ${CNI_PLUGINS[*]##*/} in $((SECONDS - t0))s"
}

# ------------------------------------------------------------------- base image
# logged_with_progress LOG CMD...: CMD with its output in LOG, saying every 30 s what it is at
# (LOG's last line); LOG's end on failure.
logged_with_progress() {
    local log=$1 t0=$SECONDS pid rc=0
    shift
    "$@" >"$log" 2>&1 &
    pid=$!
    while ! wait_timeout "$pid" 30; do
        say "$1: still going ($((SECONDS - t0))s): $(tail -n 1 "$log" | cut -c1-120)"
    done
    wait "$pid" || rc=$?
    [ "$rc" -eq 0 ] || { tail -n 30 "$log" >&2; say "$1 failed (rc=$rc, log $log)"; }
    return "$rc"
}

# The key names everything the image is made of; a change of any rebuilds it. Contents only,
# not where they are: every clone of the repository shares the cached image.
base_key() {
    { sha256sum "$here/kind-base-rootfs.sh" "$CONTAINERD_BIN"/{containerd,ctr,containerd-shim-runc-v2} \
          "$TOOLS/crictl" "$TOOLS"/cni/* | cut -d' ' -f1
      echo "$KIND_VERSION ${BASE_PACKAGES[*]} ${BASE_MIRRORS[*]}"
      declare -f base_image_from; } | sha256sum | cut -c1-12
}

# base_image_from TAR KEY: $BASE_IMAGE from the root filesystem TAR, with the Dockerfile's
# metadata (docker import cannot set STOPSIGNAL: a metadata-only build adds it, from the local
# image, no registry involved).
base_image_from() {
    local tar=$1 key=$2 rootfs_image=pykubelet/kind-base-rootfs:$2
    "$DOCKER" import "$tar" "$rootfs_image" >/dev/null
    printf '%s\n' "FROM $rootfs_image" "ENV container=docker" "STOPSIGNAL SIGRTMIN+3" \
        'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "LABEL $BASE_LABEL=$key" |
        DOCKER_BUILDKIT=0 "$DOCKER" build --quiet --tag "$BASE_IMAGE" - >/dev/null
    "$DOCKER" rmi "$rootfs_image" >/dev/null  # only the name: $BASE_IMAGE keeps the layer
    # The base this one replaces, untagged now (only images carrying our label are looked at).
    "$DOCKER" image prune --force --filter "label=$BASE_LABEL" >/dev/null
}

base_is_current() {
    [ "$("$DOCKER" image inspect --format "{{index .Config.Labels \"$BASE_LABEL\"}}" "$BASE_IMAGE" 2>/dev/null)" = "$(base_key)" ]
}

build_base() {
    local key dir tar kind_src t0=$SECONDS old
    key=$(base_key)
    tar=$OUT/base/rootfs-$key.tar
    mkdir -p "$OUT/base"
    if [ ! -f "$tar" ]; then
        kind_src=$(go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
        dir=$OUT/base/.rootfs-$key
        rm -rf "$dir"
        say "making the base root filesystem with mmdebstrap (Debian 12; minutes the first time, log $OUT/base/mmdebstrap.log)"
        logged_with_progress "$OUT/base/mmdebstrap.log" mmdebstrap --variant=minbase \
            --include="$(IFS=,; echo "${BASE_PACKAGES[*]}")" \
            --customize-hook="bash '$here/kind-base-rootfs.sh' \"\$1\" '$kind_src' '$CONTAINERD_BIN' '$TOOLS'" \
            bookworm "$dir" "${BASE_MIRRORS[@]}" || { rm -rf "$dir"; exit 1; }
        tar --numeric-owner --xattrs --xattrs-include='*' -C "$dir" -cf "$tar.tmp" .
        mv -f "$tar.tmp" "$tar"
        rm -rf "$dir"
        for old in "$OUT"/base/rootfs-*.tar; do [ "$old" = "$tar" ] || rm -f "$old"; done
        say "root filesystem: $tar ($(du -h "$tar" | cut -f1)) in $((SECONDS - t0))s"
    fi
    base_image_from "$tar" "$key"
    say "$BASE_IMAGE: $("$DOCKER" image inspect --format '{{.Id}} {{.Size}} bytes' "$BASE_IMAGE") in $((SECONDS - t0))s"
}

# ------------------------------------------------------------------- boot check
# A node container as kind runs one (provision.go's arguments for a node, on a network of its
# own), until systemd says how the boot went. It is removed afterwards, with its volume.
check_boot() {
    local name=pykubelet-kind-boot-check t0=$SECONDS state deadline
    "$DOCKER" rm --force --volumes "$name" >/dev/null 2>&1 || true
    "$DOCKER" network rm "$name" >/dev/null 2>&1 || true
    # shellcheck disable=SC2064  # expand now
    trap "'$DOCKER' rm --force --volumes '$name' >/dev/null 2>&1 || true; '$DOCKER' network rm '$name' >/dev/null 2>&1 || true" EXIT
    "$DOCKER" network create "$name" >/dev/null
    "$DOCKER" run --detach --tty --name "$name" --hostname "$name" --net "$name" --init=false \
        --privileged --cgroupns=private --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
        --tmpfs /tmp --tmpfs /run --volume /var "$BASE_IMAGE" >/dev/null
    # What kind waits for in a node's log before it goes on (NodeReachedCgroupsReadyRegexp).
    deadline=$((SECONDS + 30))
    until "$DOCKER" logs "$name" 2>&1 | grep -Eq 'Reached target .*Multi-User System.*|detected cgroup v1'; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            "$DOCKER" logs "$name" 2>&1 | tail -n 40 >&2
            say "boot check: the node's log never showed what kind waits for (30 s)"; exit 1
        fi
        sleep 0.5
    done
    # The entrypoint logs that line before it hands over to systemd: wait for PID 1 to be systemd.
    until [ "$("$DOCKER" exec "$name" cat /proc/1/comm 2>/dev/null)" = systemd ]; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            "$DOCKER" logs "$name" 2>&1 | tail -n 40 >&2
            say "boot check: the entrypoint never started systemd (30 s)"; exit 1
        fi
        sleep 0.5
    done
    state=$(timeout 120 "$DOCKER" exec "$name" systemctl is-system-running --wait 2>&1 || true)
    say "boot check: systemd in a node container is '$state' after $((SECONDS - t0))s"
    "$DOCKER" exec "$name" systemctl list-units --failed --no-legend --plain 2>&1 | sed 's/^/  failed: /'
    if [ "$state" != running ]; then
        "$DOCKER" logs "$name" 2>&1 | tail -n 40 >&2; exit 1
    fi
    # containerd's CRI, as the kubelet will reach it (crictl reads the base's /etc/crictl.yaml).
    if ! "$DOCKER" exec "$name" crictl info >/dev/null 2>&1; then
        "$DOCKER" exec "$name" journalctl -u containerd --no-pager 2>&1 | tail -n 30 >&2
        say "boot check: containerd's CRI does not answer crictl in the node"; exit 1
    fi
    say "boot check: $("$DOCKER" exec "$name" crictl version | tr '\n' ' ')"
    "$DOCKER" rm --force --volumes "$name" >/dev/null
    "$DOCKER" network rm "$name" >/dev/null
    trap - EXIT
}

install_packages docker.io mmdebstrap
bash "$here/docker.sh" start
mkdir -p "$BIN"
exec 9>"$OUT/.lock"  # two first runs at once would build everything twice
flock 9
k8s_go_env
mkdir -p "$GOCACHE"  # run_with_progress counts its files: on a new machine it does not exist yet
build_kind
build_node_tools
bash "$here/build-containerd2.sh"
CONTAINERD_BIN=$(bash "$here/build-containerd2.sh" --bin-dir)
if ! base_is_current; then
    build_base
    check_boot=1
fi
if [ -n "$check_boot" ]; then check_boot; fi
say "kind $KIND_VERSION at $BIN/kind; base image $BASE_IMAGE"
