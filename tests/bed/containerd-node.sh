#!/usr/bin/env bash
# One more containerd on this machine, for one more "node": its own root, state dir,
# socket and CNI config dir, optionally running inside a network namespace that plays
# the node's host network. Multi-node tests run one per node; anything that needs a
# containerd of its own (a second test run, a demo) can use one too.
#
#   containerd-node.sh up NAME [--netns NS] [--cni-conf-dir DIR] [--cni-bin-dir DIR] [--containerd2]
#   containerd-node.sh down NAME        stop it, remove its pods' containers, network namespaces and dirs
#   containerd-node.sh socket NAME      print its CRI endpoint
#
# The config is tests/bed/containerd.toml (what setup.sh installs) with the paths
# moved under /var/lib/pykubelet-nodes/NAME and /run/pykubelet-nodes/NAME. The CNI
# conf dir defaults to <state>/net.d (empty: NetworkReady=false until someone writes
# a network config there); the CNI bin dir to the main config's (Debian's /usr/lib/cni: a
# node whose CNI DaemonSet installs its plugin into /opt/cni/bin, as flannel's does, passes
# that). Images come from setup.sh's cache (run `make setup` first).
#
# --containerd2 (or PYKUBELET_CONTAINERD=2 in the environment) runs containerd 2.x instead of the
# machine's 1.6: the binaries build-containerd2.sh builds (built first if missing), with
# tests/bed/containerd2.toml (config version 3) edited the same way. `down` and `socket` need
# no option: a node is what it was started as.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/detach.sh"
cache="${PYKUBELET_CACHE:-/var/cache/pykubelet}"
main_config="${PYKUBELET_CONTAINERD_CONFIG:-/etc/pykubelet/containerd.toml}"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

die() { printf 'containerd-node: ERROR: %s\n' "$*" >&2; exit 1; }
[ $# -ge 2 ] || die "usage: $0 up|down|socket NAME [--netns NS] [--cni-conf-dir DIR] [--cni-bin-dir DIR]"
cmd=$1 name=$2; shift 2
[[ $name =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "node name '$name': use lowercase letters, digits and '-'"

root=/var/lib/pykubelet-nodes/$name
state=/run/pykubelet-nodes/$name
sock=$state/containerd.sock
netns='' conf_dir=$state/net.d bin_dir='' major=${PYKUBELET_CONTAINERD:-1}
while [ $# -gt 0 ]; do
    case $1 in
        --containerd2) major=2; shift ;;
        --netns) netns=$2; shift 2 ;;
        --cni-conf-dir) conf_dir=$2; shift 2 ;;
        --cni-bin-dir) bin_dir=$2; shift 2 ;;
        *) die "unknown option $1" ;;
    esac
done
case $major in
    1|1.*) template=$here/containerd.toml ;;
    2|2.*) template=$here/containerd2.toml ;;
    *) die "PYKUBELET_CONTAINERD=$major: use 1 (the machine's containerd) or 2 (containerd 2.x)" ;;
esac

ctr_ok() { [ -S "$sock" ] && ctr --address "$sock" --connect-timeout 1s --timeout 5s version >/dev/null 2>&1; }

up() {
    [ -f "$main_config" ] || die "$main_config missing: run tests/bed/setup.sh first"
    if ctr_ok; then echo "unix://$sock"; return; fi
    mkdir -p "$root" "$state" "$conf_dir"
    local snapshotter bin_dir_edit=()
    if [ "$template" = "$here/containerd2.toml" ]; then
        # Its binaries come first on the PATH: containerd finds its shim there, and images.py
        # imports with its ctr. (Debian's shim and ctr are on the PATH too.)
        bash "$here/build-containerd2.sh" >&2
        PATH="$(bash "$here/build-containerd2.sh" --bin-dir):$PATH"
    fi
    [ -n "$bin_dir" ] && bin_dir_edit=(-e "s|^\(\s*bin_dir = \).*|\1\"$bin_dir\"|"
                                       -e "s|^\(\s*bin_dirs = \).*|\1[\"$bin_dir\"]|")
    snapshotter="$(sed -n 's/^\s*snapshotter = "\(.*\)"/\1/p' "$main_config" | head -n1)"
    sed -e "s|^root = .*|root = \"$root/containerd\"|" \
        -e "s|^state = .*|state = \"$state/containerd\"|" \
        -e "s|^\(\s*address = \).*|\1\"$sock\"|" \
        -e "s|^\(\s*conf_dir = \).*|\1\"$conf_dir\"|" \
        "${bin_dir_edit[@]}" \
        -e "s|^\(\s*snapshotter = \).*|\1\"$snapshotter\"|" \
        "$template" >"$state/containerd.toml"
    local launcher=()
    # nsenter, not `ip netns exec`: that one also gives containerd a mount namespace of its own,
    # and the pod netns mounts it makes under /var/run/netns would be invisible to everyone else.
    [ -n "$netns" ] && launcher=(nsenter "--net=/var/run/netns/$netns")
    detach nohup "${launcher[@]}" containerd --config "$state/containerd.toml" \
        </dev/null >>"$state/containerd.log" 2>&1
    echo $! >"$state/containerd.pid"
    local deadline=$((SECONDS + 60))
    until ctr_ok; do
        kill -0 "$(cat "$state/containerd.pid")" 2>/dev/null || { tail -n 20 "$state/containerd.log" >&2; die "containerd $name exited"; }
        [ "$SECONDS" -lt "$deadline" ] || die "containerd $name did not answer within 60s"
        sleep 0.2
    done
    CONTAINERD_ADDRESS=$sock python3 "$here/images.py" --cache "$cache" --snapshotter "$snapshotter" >&2
    echo "unix://$sock"
}

down() {
    local netns_paths=""
    if ctr_ok; then
        # Sandboxes first: their netns and CNI state go with them.
        local ids
        ids="$(ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null || true)"
        for id in $ids; do
            # A sandbox's network namespace is a mount under /var/run/netns that outlives containerd
            # unless the sandbox is removed through CRI (a node whose agent died never did that).
            netns_paths+=" $(ctr --address "$sock" -n k8s.io containers info "$id" 2>/dev/null \
                | grep -o '"/var/run/netns/[^"]*"' | tr -d '"' || true)"
            ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
        done
    fi
    if [ -f "$state/containerd.pid" ]; then
        local pid; pid="$(cat "$state/containerd.pid")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    # Shims outlive containerd on purpose; these belong to a node that is going away. (Their
    # command line is "-namespace k8s.io -id <id> -address <socket>".)
    pkill -9 -f "containerd-shim-runc-v2 -namespace k8s.io -id [0-9a-f]+ -address $sock( |\$)" 2>/dev/null || true
    { grep -o " $state/[^ ]*\| $root/[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done
    for ns in $netns_paths; do
        [ -e "$ns" ] || continue
        umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
        rm -f "$ns"
    done
    rm -rf "$root" "$state"
}

case $cmd in
    up) up ;;
    down) down ;;
    socket) echo "unix://$sock" ;;
    *) die "unknown command $cmd" ;;
esac
