#!/usr/bin/env bash
# The test bed's Debian 12 machine image, built here from Debian's packages (no box can be
# downloaded on this machine): what a public Debian 12 Vagrant box is, and what the vagrant/
# provisioning expects of one.
#
#   systemd as init (cgroup v2, Debian 12's default), D-Bus, udev, OpenSSH with the user
#   `vagrant` (password-less sudo) who logs in with Vagrant's insecure key from Debian's
#   vagrant package, systemd-networkd: the NAT NIC (MAC 52:54:00:12:34:56) by DHCP, the
#   private network's NIC (MAC 52:54:00:56:00:NN) as 192.168.56.NN/24; nothing else is
#   configured, so network-online.target waits for these two only. Also the node's packages the provisioning would
#   install (containerd, runc, CNI plugins, python3-venv, conntrack, ...), so a VM that runs
#   ~19x slower than this host installs nothing.
#
# Output, in /var/cache/pykubelet/vm/debian12-<key>/ (key: this script's hash; built once,
# under a lock): rootfs.raw (ext4, the root filesystem, booted read-only through a qcow2
# overlay per VM), vmlinuz and initrd.img (qemu boots the kernel directly: no bootloader).
# Prints that directory. Needs root, mmdebstrap, e2fsprogs and Debian's vagrant package.
set -euo pipefail

cache="${PYKUBELET_CACHE:-/var/cache/pykubelet}/vm"
key="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
out="$cache/debian12-$key"
size=4G
say() { printf 'vm-image: %s\n' "$*" >&2; }

insecure_key_pub="$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub 2>/dev/null | head -1)"
[ -n "$insecure_key_pub" ] || { say "Debian's vagrant package is not installed (its insecure key is needed)"; exit 1; }

packages=(
    systemd systemd-sysv dbus udev libpam-systemd libnss-myhostname openssh-server sudo
    linux-image-cloud-amd64 initramfs-tools kmod procps iproute2 iputils-ping less
    containerd runc containernetworking-plugins iptables conntrack socat ethtool ebtables
    python3 python3-venv make ca-certificates curl openssl
    nftables ipvsadm ipset  # what the proxy's modes show their rules with (and kube-proxy's IPVS mode runs)
)

mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9
if [ -f "$out/done" ]; then
    echo "$out"
    exit 0
fi
# images of earlier versions of this script go: one image at a time (~700 MB on disk)
for old in "$cache"/debian12-*; do
    [ "$old" = "$out" ] || rm -rf "$old"
done
mkdir -p "$out"
root="$out/rootfs"
say "building Debian 12 with mmdebstrap into $out (takes a few minutes the first time)"
# the customize hooks run on the host with the new tree as $1
mmdebstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
    --customize-hook='echo pkl-vm > "$1/etc/hostname"' \
    --customize-hook='printf "127.0.0.1 localhost\n" > "$1/etc/hosts"' \
    --customize-hook='printf "/dev/vda / ext4 rw,relatime 0 1\n" > "$1/etc/fstab"' \
    --customize-hook='chroot "$1" useradd -m -s /bin/bash -G sudo vagrant' \
    --customize-hook='echo "vagrant ALL=(ALL) NOPASSWD: ALL" > "$1/etc/sudoers.d/vagrant" && chmod 0440 "$1/etc/sudoers.d/vagrant"' \
    --customize-hook="mkdir -p \"\$1/home/vagrant/.ssh\" && cp '$insecure_key_pub' \"\$1/home/vagrant/.ssh/authorized_keys\"" \
    --customize-hook='chroot "$1" chown -R vagrant:vagrant /home/vagrant/.ssh && chmod 0700 "$1/home/vagrant/.ssh"' \
    --customize-hook='printf "[Match]\nMACAddress=52:54:00:12:34:56\n[Network]\nDHCP=ipv4\n" > "$1/etc/systemd/network/10-nat.network"' \
    --customize-hook='printf "UseDNS no\n" > "$1/etc/ssh/sshd_config.d/pykubelet.conf"' \
    --customize-hook='chroot "$1" systemctl enable systemd-networkd ssh serial-getty@ttyS0' \
    --customize-hook='chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer man-db.timer' \
    --customize-hook='chroot "$1" systemctl disable containerd' \
    --customize-hook='printf "overlay\nbr_netfilter\n" > "$1/etc/modules-load.d/k8s.conf"' \
    --customize-hook='printf "net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\n" > "$1/etc/sysctl.d/k8s.conf"' \
    bookworm "$root" >"$out/mmdebstrap.log" 2>&1 || { tail -30 "$out/mmdebstrap.log" >&2; exit 1; }
# a private-network address per VM, keyed by the MAC the test bed (or Vagrant's libvirt) gives it
for n in $(seq 10 19); do
    printf '[Match]\nMACAddress=52:54:00:56:00:%s\n[Network]\nAddress=192.168.56.%s/24\n' "$n" "$n" \
        >"$root/etc/systemd/network/20-private-$n.network"
done
cp "$root"/boot/vmlinuz-* "$out/vmlinuz"
cp "$root"/boot/initrd.img-* "$out/initrd.img"
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
say "making the ext4 root filesystem ($size, sparse)"
mkfs.ext4 -q -F -L root -d "$root" "$out/rootfs.raw" "$size" >&2  # stdout is for the directory alone
rm -rf "$root"
touch "$out/done"
say "built $out"
echo "$out"
