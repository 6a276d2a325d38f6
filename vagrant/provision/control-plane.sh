#!/usr/bin/env bash
# The first node: `kubeadm init` with pykubelet as the kubelet, running etcd, the apiserver,
# the controller-manager and the scheduler as static pods, with the systemd cgroup driver.
# The workers join with PKL_TOKEN, a bootstrap token made here. Does nothing if the node has a
# cluster already.
#
# Environment:
#   PKL_NODE_IP     the address of this node on the private network (the API endpoint)
#   PKL_TOKEN       the bootstrap token the workers join with ([a-z0-9]{6}.[a-z0-9]{16}, valid 24 h)
#   PKL_POD_SUBNET  default 10.244.0.0/16 (the controller-manager hands out each Node's podCIDR)
#   PKL_SKIP_ADDONS kubeadm phases to skip, comma-separated (default: addon/coredns,addon/kube-proxy;
#                   empty: install both, with kube-proxy's and CoreDNS's images pulled)
#   PKL_REPO        pykubelet's source tree (default /vagrant)
set -euo pipefail

ip="${PKL_NODE_IP:?PKL_NODE_IP: the address of this node}"
pod_subnet="${PKL_POD_SUBNET:-10.244.0.0/16}"
skip="${PKL_SKIP_ADDONS-addon/coredns,addon/kube-proxy}"
token="${PKL_TOKEN:?PKL_TOKEN: the bootstrap token for the workers}"
repo="${PKL_REPO:-/vagrant}"
export KUBECONFIG=/etc/kubernetes/admin.conf PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
say() { printf '[control-plane %s] %s\n' "$(hostname)" "$*" >&2; }

if [ ! -f /etc/kubernetes/admin.conf ]; then
    skip_phases="" dns="" proxy=""
    if [ -n "$skip" ]; then
        skip_phases="skipPhases: [$(echo "$skip" | sed 's/,/, /g')]"
    fi
    # a skipped addon is disabled too, so that preflight does not pull its image
    case ",$skip," in *,addon/coredns,*) dns="dns: {disabled: true}" ;; esac
    case ",$skip," in *,addon/kube-proxy,*) proxy="proxy: {disabled: true}" ;; esac
    cat >/root/kubeadm-init.yaml <<YAML
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens: [{token: $token, ttl: 24h}]
localAPIEndpoint: {advertiseAddress: $ip, bindPort: 6443}
nodeRegistration:
  name: $(hostname)
  criSocket: unix:///run/containerd/containerd.sock
  imagePullPolicy: IfNotPresent
  kubeletExtraArgs: [{name: node-ip, value: $ip}]
$skip_phases
# kubeadm's defaults (4 min; 1 min for an API call) are short for a machine that emulates its CPU.
# kubernetesAPICall bounds the admin ClusterRoleBinding kubeadm creates before it waits for the
# control plane's health, so on a slow machine it ran out while the apiserver was still starting.
timeouts: {controlPlaneComponentHealthCheck: 20m, kubeletHealthCheck: 10m, kubernetesAPICall: 10m}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: ${K8S_VERSION:-v1.36.3}
controlPlaneEndpoint: $ip:6443
networking: {podSubnet: $pod_subnet}
$dns
$proxy
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
YAML
    say "kubeadm init (pykubelet runs the control plane)"
    kubeadm init --config /root/kubeadm-init.yaml
    # pykubelet routes every node's pod network: it lists the Nodes (docs/network.md)
    kubectl apply -f "$repo/cni/node-network-rbac.yaml"
fi
if id vagrant >/dev/null 2>&1; then  # `vagrant ssh cp -c 'kubectl get nodes'`
    install -d -o vagrant -g vagrant /home/vagrant/.kube
    install -o vagrant -g vagrant -m 0600 /etc/kubernetes/admin.conf /home/vagrant/.kube/config
fi
say "ready: kubeadm join $ip:6443 --token $token --discovery-token-ca-cert-hash sha256:$(
    openssl x509 -pubkey -noout -in /etc/kubernetes/pki/ca.crt | openssl pkey -pubin -outform der | sha256sum | cut -d' ' -f1)"
