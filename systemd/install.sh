#!/usr/bin/env bash
# `make install` / `make uninstall`: pykubelet as the machine's kubelet under systemd.
#
#   install    a virtualenv in /opt/pykubelet with pykubelet in it; /usr/bin/kubelet and
#              /usr/bin/pykubelet link to its command; kubelet.service, kubeadm's drop-in and
#              kube-proxy.service go to /usr/local/lib/systemd/system (where systemd looks for
#              locally installed units, leaving /etc/systemd/system to the admin); kubelet.service
#              is enabled, as the kubelet package enables it; systemd reloads if it runs.
#   uninstall  the reverse: the units stop (pods keep running), and every file above goes.
#
# Both are idempotent: a second install replaces pykubelet in place (a running kubelet is
# restarted to pick it up), a second uninstall finds nothing to do. A /usr/bin/kubelet that is
# not ours (the kubelet package's) is never overwritten.
#
# Environment:
#   PYKUBELET_WHEELS   a directory of wheels to install from, offline (pykubelet's and its
#                      dependencies'); unset: pykubelet from this source tree, its dependencies
#                      from the package index
#   PYTHON             the interpreter of the virtualenv (default python3; Debian: python3-venv)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
opt=/opt/pykubelet
venv="$opt/venv"
units=/usr/local/lib/systemd/system
links=(/usr/bin/kubelet /usr/bin/pykubelet)
unit_files=(kubelet.service kubelet.service.d/10-kubeadm.conf kube-proxy.service)
python="${PYTHON:-python3}"

say() { printf 'install: %s\n' "$*" >&2; }
die() { printf 'install: ERROR: %s\n' "$*" >&2; exit 1; }
systemd_runs() { [ -d /run/systemd/system ]; }
ours() { [ -L "$1" ] && [ "$(readlink "$1")" = "$venv/bin/pykubelet" ]; }

install() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    for link in "${links[@]}"; do
        if [ -e "$link" ] || [ -L "$link" ]; then
            ours "$link" || die "$link exists and is not pykubelet's (the kubelet package's?); remove it first"
        fi
    done
    "$python" -c 'import ensurepip, venv' 2>/dev/null || die "$python cannot make a virtualenv (Debian: apt-get install python3-venv)"
    say "virtualenv in $venv"
    mkdir -p "$opt"
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    if [ -n "${PYKUBELET_WHEELS:-}" ]; then
        say "pykubelet from the wheels in $PYKUBELET_WHEELS"
        "$venv/bin/pip" install -q --no-index --find-links "$PYKUBELET_WHEELS" --upgrade --force-reinstall --no-deps pykubelet
        "$venv/bin/pip" install -q --no-index --find-links "$PYKUBELET_WHEELS" pykubelet
    else
        say "pykubelet from $repo"
        "$venv/bin/pip" install -q --upgrade --force-reinstall --no-deps "$repo"
        "$venv/bin/pip" install -q "$repo"
    fi
    "$venv/bin/pykubelet" --version >/dev/null || die "the installed pykubelet does not run"
    for link in "${links[@]}"; do
        ln -sfn "$venv/bin/pykubelet" "$link"
    done
    say "units in $units"
    mkdir -p "$units/kubelet.service.d"
    for f in "${unit_files[@]}"; do
        cp "$here/$f" "$units/$f.new" && chmod 0644 "$units/$f.new" && mv -f "$units/$f.new" "$units/$f"
    done
    if command -v systemctl >/dev/null; then
        systemctl enable kubelet.service 2>/dev/null || say "could not enable kubelet.service (no systemd here?)"
    fi
    if systemd_runs; then
        systemctl daemon-reload
        if systemctl is-active --quiet kubelet.service; then
            say "restarting the running kubelet (its pods keep running)"
            systemctl restart kubelet.service
        fi
    fi
    say "done: $(/usr/bin/kubelet --version)"
}

uninstall() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    if systemd_runs; then
        systemctl stop kube-proxy.service kubelet.service 2>/dev/null || true
    fi
    if command -v systemctl >/dev/null && [ -e "$units/kubelet.service" ]; then
        systemctl disable kubelet.service kube-proxy.service 2>/dev/null || true
    fi
    for f in "${unit_files[@]}"; do
        rm -f "$units/$f"
    done
    rmdir "$units/kubelet.service.d" "$units" "$(dirname "$units")" 2>/dev/null || true  # only if empty
    for link in "${links[@]}"; do
        if ours "$link"; then rm -f "$link"; fi
    done
    rm -rf "$venv"
    rmdir "$opt" 2>/dev/null || true
    if systemd_runs; then
        systemctl daemon-reload
        systemctl reset-failed kubelet.service kube-proxy.service 2>/dev/null || true
    fi
    say "done: pykubelet's files are gone (the node's state in /var/lib/kubelet and /etc/kubernetes stays)"
}

case "${1:-}" in
    install) install ;;
    uninstall) uninstall ;;
    *) die "usage: $0 install|uninstall" ;;
esac
