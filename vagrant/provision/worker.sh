#!/usr/bin/env bash
# Every other node: `kubeadm join` of the control plane, pykubelet bootstrapping its client
# certificate with the bootstrap token. Does nothing if the node has joined already.
#
# Environment:
#   PKL_NODE_IP   the address of this node on the private network
#   PKL_CP_IP     the address of the control plane (its API on :6443)
#   PKL_TOKEN     the bootstrap token control-plane.sh made
#   PKL_CA_HASH   the cluster CA's hash (sha256:..., which control-plane.sh prints); unset: the
#                 CA is taken on trust from the private network (--discovery-token-unsafe-skip-ca-verification),
#                 which is what a throw-away Vagrant cluster can afford and a real one cannot
set -euo pipefail

ip="${PKL_NODE_IP:?PKL_NODE_IP: the address of this node}"
cp_ip="${PKL_CP_IP:?PKL_CP_IP: the address of the control plane}"
token="${PKL_TOKEN:?PKL_TOKEN: the bootstrap token}"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
say() { printf '[worker %s] %s\n' "$(hostname)" "$*" >&2; }

if [ -f /etc/kubernetes/kubelet.conf ]; then
    say "joined already"
    exit 0
fi
if [ -n "${PKL_CA_HASH:-}" ]; then
    trust="caCertHashes: [$PKL_CA_HASH]"
else
    trust="unsafeSkipCAVerification: true"
fi
cat >/root/kubeadm-join.yaml <<YAML
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken: {apiServerEndpoint: "$cp_ip:6443", token: $token, $trust}
nodeRegistration:
  name: $(hostname)
  criSocket: unix:///run/containerd/containerd.sock
  kubeletExtraArgs: [{name: node-ip, value: $ip}]
# kubeadm's defaults (5 min) are short for a machine that emulates its CPU
timeouts: {tlsBootstrap: 15m, kubeletHealthCheck: 10m, discovery: 10m}
YAML
say "kubeadm join $cp_ip:6443"
kubeadm join --config /root/kubeadm-join.yaml
