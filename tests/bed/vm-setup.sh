#!/usr/bin/env bash
# What the VM tier needs on this machine (tests/vm/): qemu (software emulation: this machine's
# /dev/kvm cannot run Debian guests), mmdebstrap and e2fsprogs to build the Debian 12 image,
# Debian's vagrant package for Vagrant's insecure SSH key (the key every public box accepts),
# and an SSH client; for Vagrant itself (make vagrant-box, vagrant-up, vagrant-test): vagrant-libvirt,
# libvirt's daemons (libvirt-daemon-system, with its sysv flavour: the -systemd one would bring
# systemd as init to a machine that has none; tests/bed/libvirt.sh starts the daemons), dnsmasq
# for libvirt's NAT network, virsh, and rsync for Vagrant's synced folders. Idempotent: installs
# only what is missing.
set -euo pipefail
pkgs=(qemu-system-x86 qemu-utils mmdebstrap e2fsprogs vagrant openssh-client
      vagrant-libvirt libvirt-daemon-system libvirt-daemon-system-sysv libvirt-clients dnsmasq-base rsync)
missing=()
for p in "${pkgs[@]}"; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" = installed ] || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    printf 'vm-setup: installing %s\n' "${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
bash "$(dirname "${BASH_SOURCE[0]}")/libvirt.sh" setup
