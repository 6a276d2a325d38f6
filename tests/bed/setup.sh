#!/usr/bin/env bash
# pykubelet test bed: packages, containerd (our own config), CNI, local images.
#
# Idempotent and safe to rerun: a second run installs nothing, leaves a running
# containerd alone and only checks that the images are already there.
#
# Needs root. Works without systemd as PID 1: containerd is started by this script
# in its own session (setsid), so it outlives the script.
#
# Environment overrides:
#   PYKUBELET_CACHE              built image tars live here (default /var/cache/pykubelet)
#   PYKUBELET_CONTAINERD_CONFIG  where our containerd config goes (default /etc/pykubelet/containerd.toml)
#   PYKUBELET_LOG_DIR            daemon logs (default /var/log/pykubelet)
#   PYKUBELET_CONTAINERD_WAIT    seconds to wait for containerd to answer (default 60)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/detach.sh"

export PYKUBELET_CACHE="${PYKUBELET_CACHE:-/var/cache/pykubelet}"
export PYKUBELET_CONTAINERD_CONFIG="${PYKUBELET_CONTAINERD_CONFIG:-/etc/pykubelet/containerd.toml}"
log_dir="${PYKUBELET_LOG_DIR:-/var/log/pykubelet}"
wait_s="${PYKUBELET_CONTAINERD_WAIT:-60}"
config="$PYKUBELET_CONTAINERD_CONFIG"
sock=/run/containerd/containerd.sock
run_dir=/run/pykubelet
cni_dir=/etc/cni/net.d
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

say() { printf 'setup: %s\n' "$*" >&2; }
warn() { printf 'setup: WARNING: %s\n' "$*" >&2; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"

# ctr waits ~10s to give up on a dead socket unless told otherwise.
ctr_ok() { [ -S "$sock" ] && ctr --address "$sock" --connect-timeout 1s --timeout 5s version >/dev/null 2>&1; }

# ------------------------------------------------------------------ packages
# nftables: `pykubelet proxy --proxy-mode nftables` (nft); iptables: its default mode and the CNI plugins;
# conntrack: the Service tests show a node's flows when a connection fails; shellcheck: the
# scripts' lint (tests/unit/test_shell_scripts.py).
pkgs=(containerd runc containernetworking-plugins busybox-static iptables nftables conntrack iproute2 gcc libc6-dev
      shellcheck)
missing=()
for p in "${pkgs[@]}"; do
    if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != installed ]; then
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # policy-rc.d 101: don't let the package try to start its own containerd.
    policy=/usr/sbin/policy-rc.d
    added_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 0755 "$policy"; added_policy=1
    fi
    rc=0
    apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
    if [ -n "$added_policy" ]; then rm -f "$policy"; fi
    [ "$rc" -eq 0 ] || die "apt-get install failed (rc=$rc)"
fi

# ------------------------------------------------------- containerd config
# Overlayfs if an overlay mount works where containerd keeps its snapshots
# (it does not on e.g. overlay-on-overlay inside some containers); else native.
snapshotter=overlayfs
mkdir -p /var/lib/containerd
t="$(mktemp -d /var/lib/containerd/.pykubelet-ovl-test.XXXXXX)"
mkdir -p "$t/l" "$t/u" "$t/w" "$t/m"
if mount -t overlay overlay -o "lowerdir=$t/l,upperdir=$t/u,workdir=$t/w" "$t/m" 2>/dev/null; then
    umount "$t/m"
else
    snapshotter=native
    warn "overlay mount failed under /var/lib/containerd; using the native snapshotter"
fi
rm -rf "$t"
export CONTAINERD_SNAPSHOTTER="$snapshotter"   # ctr honours it (images.py too)

new_cfg="$(mktemp)"
sed "s/^\(\s*snapshotter = \)\"overlayfs\"/\1\"$snapshotter\"/" "$here/containerd.toml" >"$new_cfg"
mkdir -p "$(dirname "$config")"
if ! cmp -s "$new_cfg" "$config"; then
    install -m 0644 "$new_cfg" "$config"
    say "wrote $config (snapshotter $snapshotter)"
fi
rm -f "$new_cfg"

# ------------------------------------------------------------------- CNI
# The agent writes containerd's network config (10-pykubelet.conflist) itself, in both
# network modes; until then containerd reports NetworkReady=false, as on a fresh node.
mkdir -p "$cni_dir"

# ------------------------------------------------------------- containerd
mkdir -p "$log_dir" "$run_dir"
cfg_sum="$(sha256sum "$config" | cut -d' ' -f1)"
if ctr_ok; then
    # Already up: leave it alone, but say so if it runs with another config.
    # Other containerds may run on other sockets: look only at the one that
    # listens on ours.
    running_cfg=
    pid="$(ss -xlpn src "$sock" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n1)"
    if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ]; then
        args=()
        mapfile -d '' args <"/proc/$pid/cmdline" || true
        for ((i = 0; i < ${#args[@]}; i++)); do
            case "${args[$i]}" in
                --config|-c) running_cfg="${args[$((i + 1))]:-}" ;;
                --config=*) running_cfg="${args[$i]#--config=}" ;;
            esac
        done
    fi
    if [ -z "$pid" ]; then
        warn "could not tell which process serves $sock; leaving it alone"
    elif [ "$running_cfg" != "$config" ]; then
        warn "containerd is already running with config '${running_cfg:-<default /etc/containerd/config.toml>}', not $config; leaving it alone"
    else
        # Ours: its pid file names it, even if someone restarted it by hand (tests signal it).
        echo "$pid" >"$run_dir/containerd.pid"
        if [ "$(cat "$run_dir/containerd.config.sha256" 2>/dev/null)" != "$cfg_sum" ]; then
            warn "$config changed since containerd started; restart containerd to apply it"
        fi
    fi
else
    [ -S "$sock" ] && warn "stale $sock (no answer); starting a new containerd"
    say "starting containerd (log $log_dir/containerd.log)"
    detach nohup containerd --config "$config" </dev/null >>"$log_dir/containerd.log" 2>&1
    pid=$!
    echo "$pid" >"$run_dir/containerd.pid"
    echo "$cfg_sum" >"$run_dir/containerd.config.sha256"
    deadline=$((SECONDS + wait_s))
    until ctr_ok; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 30 "$log_dir/containerd.log" >&2 || true
            die "containerd exited during startup (see $log_dir/containerd.log)"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 30 "$log_dir/containerd.log" >&2 || true
            die "containerd did not answer within ${wait_s}s (pid $pid)"
        fi
        sleep 0.2
    done
    disown "$pid" 2>/dev/null || true
    say "containerd up (pid $pid)"
fi

# ----------------------------------------------------------------- images
python3 "$here/images.py" --cache "$PYKUBELET_CACHE" --snapshotter "$snapshotter"

# ---------------------------------------------------------------- summary
server_version="$(ctr --connect-timeout 1s version 2>/dev/null | awk '/^Server:/{s=1} s && /Version:/{print $2; exit}')"
echo "== pykubelet test bed =="
echo "containerd:  ${server_version:-?} (socket $sock, config $config, snapshotter $snapshotter)"
echo "cni:         $(ls "$cni_dir" 2>/dev/null | tr '\n' ' ')"
echo "images (k8s.io):"
# (the CRI plugin adds sha256:<image id> refs of its own; only names are shown)
ctr -n k8s.io images ls -q | grep -v '^sha256:' | sed 's/^/  /' || true
