#!/usr/bin/env bash
# `make vagrant-up` / `make vagrant-down`: the project's Vagrantfile (vagrant/) run for real on
# this machine, offline, with vagrant-libvirt and qemu's software emulation.
#
#   vagrant.sh up     libvirt's daemons (libvirt.sh start), the box pykubelet/debian12
#                     (vagrant_box.sh, cached), the offline bundle in vagrant/.bundle
#                     (tests/vm/vagrant_bundle.py), then `vagrant up` in vagrant/; prints how long it took
#   vagrant.sh down   `vagrant destroy -f`, the box's volume in libvirt's pool (vagrant-libvirt's
#                     copy of box.img, made again by the next up), the bundle and vagrant/.vagrant
#                     removed, libvirt's daemons stopped: the machine as it was before `up`
#
# Environment: what the Vagrantfile reads (PKL_WORKERS, PKL_PROXY_MODE, PKL_SKIP_ADDONS, ...);
# PKL_BOX defaults to pykubelet/debian12 and PKL_LIBVIRT_DRIVER to qemu here (this machine's KVM
# cannot run Debian guests). PYTHON: the interpreter with pykubelet's test dependencies
# (default .venv/bin/python).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
export VAGRANT_DEFAULT_PROVIDER=libvirt PKL_BOX="${PKL_BOX:-pykubelet/debian12}"
export PKL_LIBVIRT_DRIVER="${PKL_LIBVIRT_DRIVER:-qemu}"
say() { printf 'vagrant.sh: %s\n' "$*" >&2; }

up() {
    bash "$here/libvirt.sh" start
    [ "$PKL_BOX" != pykubelet/debian12 ] || bash "$here/vagrant_box.sh"
    (cd "$repo" && "$python" -m tests.vm.vagrant_bundle >/dev/null)
    say "vagrant up (box $PKL_BOX, ${PKL_WORKERS:-1} worker(s), proxy mode ${PKL_PROXY_MODE:-iptables}; minutes under emulation)"
    local start=$SECONDS
    (cd "$repo/vagrant" && vagrant up)
    say "vagrant up took $((SECONDS - start)) s"
}

down() {
    if bash "$here/libvirt.sh" status; then
        (cd "$repo/vagrant" && vagrant destroy -f)
        local vol
        for vol in $(virsh -q -c qemu:///system vol-list --pool default 2>/dev/null | awk '{print $1}' |
                     grep -- '_vagrant_box_image_' || true); do
            virsh -q -c qemu:///system vol-delete --pool default "$vol" >/dev/null
        done
    fi
    rm -rf "$repo/vagrant/.bundle" "$repo/vagrant/.vagrant"
    bash "$here/libvirt.sh" stop
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    *) say "usage: $0 up|down"; exit 1 ;;
esac
