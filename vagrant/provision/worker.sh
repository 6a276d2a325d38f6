#!/usr/bin/env bash
# Every other node: `kubeadm join` of the control plane, pykubelet bootstrapping its client
# certificate with the bootstrap token. Does nothing if the node has joined already.
#
# Environment:
#   PKL_NODE_IP   this node's address on the private network
#   PKL_CP_IP     the control plane's address (its API on :6443)
#   PKL_TOKEN     the bootstrap token control-plane.sh made
#   PKL_CA_HASH   the cluster CA's hash (sha256:..., which control-plane.sh prints); unset: the
#                 CA is taken on trust from the private network (--discovery-token-unsafe-skip-ca-verification),
#                 which is what a throw-away Vagrant cluster can afford and a real one cannot
set -euo pipefail

ip="${PKL_NODE_IP:?PKL_NODE_IP: this node's address}"
cp_ip="${PKL_CP_IP:?PKL_CP_IP: the control plane's address}"
token="${PKL_TOKEN:?PKL_TOKEN: the bootstrap token}"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
say() { printf '[worker %s] %s\n' "$(hostname)" "$*" >&2; }

if [ -f /etc/kubernetes/kubelet.conf ]; then
    say "joined already"
    exit 0
fi
printf 'KUBELET_EXTRA_ARGS=--node-ip=%s\n' "$ip" >/etc/default/kubelet
if [ -n "${PKL_CA_HASH:-}" ]; then
    trust=(--discovery-token-ca-cert-hash "$PKL_CA_HASH")
else
    trust=(--discovery-token-unsafe-skip-ca-verification)
fi
say "kubeadm join $cp_ip:6443"
kubeadm join "$cp_ip:6443" --token "$token" "${trust[@]}" --node-name "$(hostname)"
