#!/usr/bin/env bash
# `make vagrant-box`: the VM tier's Debian 12 image (tests/bed/vm_image.sh) as a Vagrant box for
# vagrant-libvirt, added to Vagrant as pykubelet/debian12 (nothing can come from Vagrant Cloud here).
#
# The image already is what a public Debian 12 box is (systemd, sshd, the user `vagrant` with
# password-less sudo and Vagrant's insecure key); the box adds what Vagrant itself uses:
#   rsync         for the synced folders (Vagrant would apt-get it on first boot, offline it cannot)
#   eth0 by DHCP  vagrant-libvirt's management network gives each VM a random MAC; the image
#                 configures only the test bed's fixed MACs. net.ifnames=0 on the kernel's
#                 command line makes the first NIC eth0; Vagrant configures the others itself
#                 (systemd-networkd files of its own).
# The image has no bootloader (the VM tier boots its kernel directly), so neither has the box:
# its Vagrantfile hands libvirt the kernel, the initrd and the command line, kept in the box.
#
# Box: box.img (qcow2 of the image's ext4 root filesystem, /dev/vda), metadata.json, Vagrantfile,
# vmlinuz, initrd.img, pkl-key. Cached: nothing is done when the box Vagrant has carries the key
# (the hash of the image's files and of this script). Needs root (a loop mount), qemu-img, apt.
#
# Environment: VAGRANT_HOME (Vagrant's, default ~/.vagrant.d), PKL_BOX_NAME (default pykubelet/debian12).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="${PKL_BOX_NAME:-pykubelet/debian12}"
vagrant_home="${VAGRANT_HOME:-$HOME/.vagrant.d}"
installed="$vagrant_home/boxes/${name//\//-VAGRANTSLASH-}/0/libvirt"
# what the image lacks of them, with their libraries the image lacks
extra_packages=(rsync libpopt0)
cmd_line="root=/dev/vda rw console=ttyS0 net.ifnames=0 quiet"
say() { printf 'vagrant-box: %s\n' "$*" >&2; }

[ "$(id -u)" -eq 0 ] || { say "must run as root (the image is changed through a loop mount)"; exit 1; }
image="$(bash "$here/vm_image.sh")"
say "hashing the image in $image (its content is the box's cache key)"
key="$( (sha256sum "$image/vmlinuz" "$image/initrd.img" "$image/rootfs.raw" | cut -c1-64; sha256sum "${BASH_SOURCE[0]}" | cut -c1-64) \
        | sha256sum | cut -c1-16)"
if [ "$(cat "$installed/pkl-key" 2>/dev/null)" = "$key" ]; then
    say "$name is up to date (key $key)"
    exit 0
fi

work="$(mktemp -d "${TMPDIR:-/var/tmp}/pkl-vagrant-box.XXXXXX")"
mnt="$work/mnt"
cleanup() {
    mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
    rm -rf "$work"
}
trap cleanup EXIT

say "copying the root filesystem (sparse)"
cp --sparse=always "$image/rootfs.raw" "$work/root.raw"
say "fetching ${extra_packages[*]} from Debian's archive"
mkdir -p "$work/debs" "$mnt"
(cd "$work/debs" && apt-get download -q -o APT::Sandbox::User=root "${extra_packages[@]}" >/dev/null)
mount -o loop "$work/root.raw" "$mnt"
say "installing those packages and the management NIC's network config into the box's filesystem"
cp "$work"/debs/*.deb "$mnt/tmp/"
chroot "$mnt" sh -c 'dpkg -i /tmp/*.deb >/dev/null && rm -f /tmp/*.deb'
printf '# vagrant-libvirt'"'"'s management network (random MAC; eth0 by net.ifnames=0): written by tests/bed/vagrant_box.sh\n[Match]\nName=eth0\n[Network]\nDHCP=ipv4\n' \
    >"$mnt/etc/systemd/network/90-vagrant-management.network"
umount "$mnt"

box="$work/box"
mkdir -p "$box"
say "converting to qcow2"
qemu-img convert -p -O qcow2 "$work/root.raw" "$box/box.img"
rm -f "$work/root.raw"
cp "$image/vmlinuz" "$image/initrd.img" "$box/"
echo "$key" >"$box/pkl-key"
size_gb=$(( ($(stat -c %s "$image/rootfs.raw") + (1 << 30) - 1) >> 30 ))
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$size_gb" >"$box/metadata.json"
cat >"$box/Vagrantfile" <<RUBY
# pykubelet/debian12: the pykubelet test bed's Debian 12 image (tests/bed/vagrant_box.sh). It has
# no bootloader: libvirt boots the kernel and initrd kept beside this file.
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.kernel = File.join(__dir__, "vmlinuz")
    lv.initrd = File.join(__dir__, "initrd.img")
    lv.cmd_line = "$cmd_line"
    lv.disk_bus = "virtio"
  end
end
RUBY
say "packing the box"
tar -C "$box" -cf "$work/pykubelet-debian12.box" metadata.json Vagrantfile box.img vmlinuz initrd.img pkl-key
rm -rf "$box"
say "vagrant box add --force $name"
vagrant box add --force --name "$name" "$work/pykubelet-debian12.box" >&2
[ "$(cat "$installed/pkl-key" 2>/dev/null)" = "$key" ] || { say "the box was added but not found in $installed"; exit 1; }
say "added $name (key $key)"
