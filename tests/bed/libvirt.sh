#!/usr/bin/env bash
# libvirt for Vagrant (vagrant-libvirt), started and stopped by hand as docker.sh does dockerd
# (no systemd as PID 1 here).
#
#   libvirt.sh setup    qemu's domains run as root (once; vm-setup runs it): the box's kernel and
#                       initrd stay in Vagrant's home under /root, which libvirt-qemu cannot enter
#   libvirt.sh start    virtlogd, virtlockd and libvirtd, unless libvirtd answers; idempotent
#   libvirt.sh stop     every running domain and active network of this libvirt gone (Vagrant's
#                       destroy removes its own; this catches what an interrupted run left), then
#                       the three daemons stopped: dnsmasq and the NAT rules go with the networks,
#                       and the empty LIBVIRT_* chains libvirt leaves behind are removed
#   libvirt.sh status   exit 0 if libvirtd answers
#
# Networks are vagrant-libvirt's own (its management network, NAT with dnsmasq, 192.168.121.0/24,
# and one per private network); libvirt's `default` network is left unstarted.
# Logs: $PYKUBELET_LOG_DIR (default /var/log/pykubelet)/libvirtd.log, virtlogd.log, virtlockd.log.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/detach.sh"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
log_dir="${PYKUBELET_LOG_DIR:-/var/log/pykubelet}"
wait_s="${PYKUBELET_LIBVIRT_WAIT:-60}"
uri=qemu:///system
qemu_conf=/etc/libvirt/qemu.conf
daemons=(virtlogd virtlockd libvirtd)  # started in this order, stopped in the reverse

say() { printf 'libvirt.sh: %s\n' "$*" >&2; }
die() { printf 'libvirt.sh: ERROR: %s\n' "$*" >&2; exit 1; }
pidfile() { echo "/run/pykubelet-$1.pid"; }
virsh_() { timeout 60 virsh -q -c "$uri" "$@"; }
libvirtd_ok() { [ -S /run/libvirt/libvirt-sock ] && timeout 10 virsh -q -c "$uri" version >/dev/null 2>&1; }
socket_of() {
    case "$1" in
        virtlogd) echo /run/libvirt/virtlogd-sock ;;
        virtlockd) echo /run/libvirt/virtlockd-sock ;;
        libvirtd) echo /run/libvirt/libvirt-sock ;;
    esac
}

setup() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    [ -f "$qemu_conf" ] || die "$qemu_conf missing: install libvirt-daemon-system (make vm-setup)"
    if ! grep -q '^user = "root"' "$qemu_conf"; then
        say "qemu's domains run as root ($qemu_conf)"
        printf '\n# pykubelet test bed (tests/bed/libvirt.sh): domains run as root, so that a box kept in\n# /root/.vagrant.d can boot its own kernel and initrd.\nuser = "root"\ngroup = "root"\n' >>"$qemu_conf"
    fi
}

start_daemon() {
    local name=$1 pid sock
    sock=$(socket_of "$name")
    pid=$(cat "$(pidfile "$name")" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ -S "$sock" ]; then
        return 0
    fi
    mkdir -p "$log_dir" /run/libvirt
    say "starting $name (log $log_dir/$name.log)"
    detach nohup "/usr/sbin/$name" --pid-file "$(pidfile "$name").own" </dev/null >>"$log_dir/$name.log" 2>&1
    pid=$!
    echo "$pid" >"$(pidfile "$name")"
    local deadline=$((SECONDS + wait_s))
    until [ -S "$sock" ]; do
        kill -0 "$pid" 2>/dev/null || { tail -n 30 "$log_dir/$name.log" >&2; die "$name exited during startup"; }
        [ "$SECONDS" -lt "$deadline" ] || die "$name made no socket within ${wait_s}s (pid $pid)"
        sleep 0.2
    done
    disown "$pid" 2>/dev/null || true
}

start() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    command -v libvirtd >/dev/null || die "libvirtd not found: make vm-setup installs libvirt-daemon-system"
    libvirtd_ok && return 0
    setup
    for d in "${daemons[@]}"; do
        start_daemon "$d"
    done
    local deadline=$((SECONDS + wait_s))
    until libvirtd_ok; do
        [ "$SECONDS" -lt "$deadline" ] || { tail -n 30 "$log_dir/libvirtd.log" >&2; die "libvirtd does not answer"; }
        sleep 0.5
    done
    say "libvirt up: $(virsh -c "$uri" version | grep -i 'running hypervisor' || true)"
}

stop() {
    if libvirtd_ok; then
        local name
        for name in $(virsh_ list --name); do
            say "domain $name still running: destroying it"
            virsh_ destroy "$name" >/dev/null || true
        done
        # the networks' dnsmasq and NAT rules outlive libvirtd unless the networks go first
        for name in $(virsh_ net-list --name); do
            say "stopping network $name"
            virsh_ net-destroy "$name" >/dev/null || true
        done
    fi
    local i
    for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
        stop_pid "$(pidfile "${daemons[i]}")" "${daemons[i]}" 60
    done
    remove_empty_chains
}

# libvirt makes its top-level chains (LIBVIRT_INP, _FWI, _PRT, ...) and the jumps to them when its
# first network starts, and keeps them, empty, after the last one goes. Only when every one of
# them is empty (no network of any libvirt uses them) are they removed, jumps first.
remove_empty_chains() {
    local cmd table rule chain chains argv
    for cmd in iptables ip6tables; do
        command -v "$cmd" >/dev/null || continue
        for table in filter nat mangle; do
            chains=$("$cmd" -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^LIBVIRT_/ {print $2}')
            [ -n "$chains" ] || continue
            for chain in $chains; do
                if "$cmd" -w -t "$table" -S "$chain" | grep -q '^-A'; then
                    say "$cmd $table: $chain still has rules; libvirt's chains left as they are"
                    return 0
                fi
            done
            "$cmd" -w -t "$table" -S | grep -E -- '-j LIBVIRT_[A-Z]+$' | while read -r rule; do
                read -ra argv <<<"${rule/#-A/-D}"
                "$cmd" -w -t "$table" "${argv[@]}"
            done
            for chain in $chains; do
                "$cmd" -w -t "$table" -X "$chain"
            done
        done
    done
}

case "${1:-}" in
    setup) setup ;;
    start) start ;;
    stop) stop ;;
    status) libvirtd_ok ;;
    *) die "usage: $0 setup|start|stop|status" ;;
esac
