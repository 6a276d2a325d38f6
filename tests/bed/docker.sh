#!/usr/bin/env bash
# Docker for kind: Debian's docker.io daemon, started and stopped by hand as setup.sh does
# containerd (no systemd as PID 1 here).
#
#   docker.sh start    start dockerd (and the containerd it runs on) unless it answers; idempotent
#   docker.sh stop     stop dockerd (it stops its containers first) and that containerd
#   docker.sh status   exit 0 if dockerd answers
#
# dockerd gets a containerd of its own: left to itself, dockerd 20.10 adopts whatever containerd
# listens on /run/containerd/containerd.sock, which is the test bed's (setup.sh), and would put
# its containers into that one. Its containerd lives where dockerd's own supervised one would
# (state under /run/docker/containerd, data under /var/lib/docker/containerd), without the CRI
# plugin (docker does not use it; loaded, it would read the machine's CNI config).
#
# Networking: no default bridge (docker0; kind makes its own network) and no iptables rules on
# the machine (--iptables=false): the test bed's own netfilter rules stay alone, nothing is left
# behind when dockerd stops, and kind's node containers reach each other on their bridge without
# them. Published ports go through docker-proxy.
#
# Runtime: runc through runc_bounded.py, which leaves out of a container's capabilities those this
# machine's bounding set lacks (dockerd 20.10 asks for every capability for a privileged
# container, as kind's nodes are, and runc fails on one it cannot grant).
#
# The docker client is Debian's /usr/bin/docker (a PATH may hold another one first).
# Logs: $PYKUBELET_LOG_DIR (default /var/log/pykubelet)/dockerd.log and docker-containerd.log.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/detach.sh"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
DOCKER=/usr/bin/docker
log_dir="${PYKUBELET_LOG_DIR:-/var/log/pykubelet}"
wait_s="${PYKUBELET_DOCKER_WAIT:-60}"
cd_state=/run/docker/containerd
cd_sock=$cd_state/containerd.sock
cd_pidfile=$cd_state/containerd.pid
docker_pidfile=/run/docker.pid
docker_sock=/run/docker.sock
runtime=/run/pykubelet/docker-runc

say() { printf 'docker.sh: %s\n' "$*" >&2; }
die() { printf 'docker.sh: ERROR: %s\n' "$*" >&2; exit 1; }

containerd_ok() { [ -S "$cd_sock" ] && ctr --address "$cd_sock" --connect-timeout 1s --timeout 5s version >/dev/null 2>&1; }
docker_ok() { [ -S "$docker_sock" ] && timeout 10 "$DOCKER" -H "unix://$docker_sock" version >/dev/null 2>&1; }

# wait_until CHECK PID LOG WHAT: until CHECK succeeds; fails if PID exits or time runs out.
wait_until() {
    local check=$1 pid=$2 log=$3 what=$4 deadline=$((SECONDS + wait_s))
    until "$check"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 30 "$log" >&2 || true
            die "$what exited during startup (see $log)"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 30 "$log" >&2 || true
            die "$what did not answer within ${wait_s}s (pid $pid)"
        fi
        sleep 0.2
    done
}

start_containerd() {
    containerd_ok && return 0
    mkdir -p "$cd_state" /var/lib/docker/containerd/daemon "$log_dir"
    cat >"$cd_state/containerd.toml" <<EOF
version = 2
root = "/var/lib/docker/containerd/daemon"
state = "$cd_state/daemon"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$cd_sock"
[ttrpc]
  address = "$cd_sock.ttrpc"
EOF
    say "starting docker's containerd (log $log_dir/docker-containerd.log)"
    detach nohup containerd --config "$cd_state/containerd.toml" </dev/null >>"$log_dir/docker-containerd.log" 2>&1
    local pid=$!
    echo "$pid" >"$cd_pidfile"
    wait_until containerd_ok "$pid" "$log_dir/docker-containerd.log" "docker's containerd"
    disown "$pid" 2>/dev/null || true
}

start() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    command -v dockerd >/dev/null || die "dockerd not found: tests/bed/build-kind.sh installs docker.io"
    docker_ok && return 0
    start_containerd
    mkdir -p "$log_dir" "$(dirname "$runtime")"
    install -m 0755 "$here/runc_bounded.py" "$runtime"
    say "starting dockerd (log $log_dir/dockerd.log)"
    detach nohup dockerd --containerd "$cd_sock" --data-root /var/lib/docker --exec-root /run/docker \
        --pidfile "$docker_pidfile" --host "unix://$docker_sock" --bridge none --iptables=false \
        --add-runtime "runc-bounded=$runtime" --default-runtime runc-bounded \
        </dev/null >>"$log_dir/dockerd.log" 2>&1
    local pid=$!
    wait_until docker_ok "$pid" "$log_dir/dockerd.log" dockerd
    disown "$pid" 2>/dev/null || true
    say "dockerd up (pid $pid): $("$DOCKER" version --format 'server {{.Server.Version}}')"
}

stop() {
    # dockerd stops its running containers first (each with its stop signal and timeout).
    stop_pid "$docker_pidfile" dockerd 120
    stop_pid "$cd_pidfile" "docker's containerd" 30
    rm -f "$runtime"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) docker_ok ;;
    *) die "usage: $0 start|stop|status" ;;
esac
