#!/usr/bin/env bash
# Every node, after control-plane.sh or worker.sh: the Service proxy, `pykubelet proxy` as the
# node's kube-proxy.service (`make install` ships the unit), in the mode PKL_PROXY_MODE names.
# It runs with the node's own kubeconfig (/etc/kubernetes/kubelet.conf); on the control plane
# this script also grants the nodes kube-proxy's permissions (proxy-rbac.yaml). Idempotent: the
# unit restarts only when its configuration changed.
#
# Environment:
#   PKL_PROXY_MODE  iptables (default, as kube-proxy's), nftables or ipvs
#   PKL_POD_SUBNET  the pods' addresses (clusterCIDR; default 10.244.0.0/16, as control-plane.sh's)
#   PKL_REPO        pykubelet's source tree (default /vagrant)
set -euo pipefail

mode="${PKL_PROXY_MODE:-iptables}"
pod_subnet="${PKL_POD_SUBNET:-10.244.0.0/16}"
repo="${PKL_REPO:-/vagrant}"
config=/var/lib/kube-proxy/config.conf
export DEBIAN_FRONTEND=noninteractive PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
say() { printf '[proxy %s] %s\n' "$(hostname)" "$*" >&2; }

case "$mode" in
    iptables | nftables | ipvs) ;;
    *) say "PKL_PROXY_MODE=$mode: must be iptables, nftables or ipvs"; exit 1 ;;
esac
[ -f /etc/kubernetes/kubelet.conf ] || { say "/etc/kubernetes/kubelet.conf missing: run control-plane.sh or worker.sh first"; exit 1; }
# the mode's own tools, to look at what the proxy wrote (kube-proxy's IPVS mode also runs ipset)
# shellcheck source=vagrant/provision/packages.sh
source "$repo/vagrant/provision/packages.sh"
case "$mode" in
    nftables) install_missing nftables ;;
    ipvs) install_missing ipvsadm ipset ;;
esac
if [ -f /etc/kubernetes/admin.conf ]; then
    kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f "$repo/vagrant/provision/proxy-rbac.yaml"
fi

new=$(mktemp)
cat >"$new" <<YAML
# Written by pykubelet's vagrant/provision/proxy.sh.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: $mode
clusterCIDR: $pod_subnet
hostnameOverride: $(hostname)
clientConnection: {kubeconfig: /etc/kubernetes/kubelet.conf}
YAML
mkdir -p "$(dirname "$config")"
if cmp -s "$new" "$config"; then
    rm -f "$new"
    systemctl enable --now kube-proxy.service
else
    say "pykubelet proxy in $mode mode (kube-proxy.service)"
    install -m 0644 "$new" "$config" && rm -f "$new"
    systemctl enable kube-proxy.service
    systemctl restart kube-proxy.service
fi
for _ in $(seq 60); do
    systemctl is-active --quiet kube-proxy.service && exit 0
    sleep 1
done
journalctl -u kube-proxy.service --no-pager -n 30 >&2
say "kube-proxy.service is not active"
exit 1
