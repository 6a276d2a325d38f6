#!/usr/bin/env bash
# Every node: what kubeadm and pykubelet need on a Debian 12 machine with systemd, then
# pykubelet as the machine's kubelet (`make install`). Idempotent: a second run changes nothing.
#
#   packages     containerd, runc, the CNI plugins, python3-venv, conntrack, ... (apt; skipped
#                when the machine has them)
#   kernel       overlay and br_netfilter loaded, IP forwarding, no swap
#   containerd   its own config with the systemd cgroup driver (SystemdCgroup = true), Debian's
#                CNI plugin directory, and kubeadm's pause image as the sandbox image
#   kubeadm      kubeadm and kubectl in /usr/local/bin
#   images       the images kubeadm's control plane runs, imported into containerd
#   pykubelet    `make install`: /opt/pykubelet, /usr/bin/kubelet, kubelet.service (enabled)
#
# Environment:
#   PKL_REPO     pykubelet's source tree (default /vagrant, where Vagrant syncs it)
#   PKL_BUNDLE   a directory with bin/{kubeadm,kubectl}, images/*.tar and wheels/ (the test bed's,
#                which cannot download anything); unset: kubeadm and kubectl are downloaded
#                from dl.k8s.io, kubeadm pulls the images, pip installs pykubelet's dependencies
#   K8S_VERSION  default v1.36.3
set -euo pipefail

repo="${PKL_REPO:-/vagrant}"
bundle="${PKL_BUNDLE:-}"
version="${K8S_VERSION:-v1.36.3}"
pause_image=registry.k8s.io/pause:3.10.2
say() { printf '[node %s] %s\n' "$(hostname)" "$*" >&2; }
export DEBIAN_FRONTEND=noninteractive PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# shellcheck source=vagrant/provision/packages.sh
source "$repo/vagrant/provision/packages.sh"
install_missing containerd runc containernetworking-plugins iptables conntrack socat ethtool python3 python3-venv \
    make ca-certificates curl openssl

say "kernel: overlay, br_netfilter, forwarding, no swap"
printf 'overlay\nbr_netfilter\n' >/etc/modules-load.d/k8s.conf
modprobe overlay
modprobe br_netfilter
printf 'net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\n' >/etc/sysctl.d/k8s.conf
sysctl -q --system
swapoff -a
sed -i '/\sswap\s/s/^/#/' /etc/fstab

say "containerd with the systemd cgroup driver"
mkdir -p /etc/containerd
new=$(mktemp)
cat >"$new" <<TOML
# Written by pykubelet's vagrant/provision/node.sh.
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # kubeadm configures the kubelet with cgroupDriver: systemd; the runtime must agree
        SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
TOML
if ! cmp -s "$new" /etc/containerd/config.toml; then
    install -m 0644 "$new" /etc/containerd/config.toml
    systemctl enable containerd
    systemctl restart containerd
else
    systemctl enable --now containerd
fi
rm -f "$new"

say "kubeadm and kubectl $version"
for tool in kubeadm kubectl; do
    if [ -n "$bundle" ]; then
        install -m 0755 "$bundle/bin/$tool" "/usr/local/bin/$tool"
    elif ! /usr/local/bin/$tool version --client 2>/dev/null | grep -q "$version"; then
        url="https://dl.k8s.io/release/$version/bin/linux/amd64/$tool"
        curl -fsSLo "/tmp/$tool" "$url"
        echo "$(curl -fsSL "$url.sha256")  /tmp/$tool" | sha256sum --check --quiet
        install -m 0755 "/tmp/$tool" "/usr/local/bin/$tool" && rm -f "/tmp/$tool"
    fi
done

if [ -n "$bundle" ]; then
    say "images from $bundle/images"
    for tar in "$bundle"/images/*.tar; do
        ctr -n k8s.io images import "$tar" >/dev/null
    done
fi

say "pykubelet: make install"
if [ -n "$bundle" ]; then
    PYKUBELET_WHEELS="$bundle/wheels" make -s -C "$repo" install
else
    make -s -C "$repo" install
fi
