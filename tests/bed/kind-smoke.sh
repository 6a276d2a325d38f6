#!/usr/bin/env bash
# kind-smoke.sh IMAGE [NAME [WORKER_IMAGE]]: one kind cluster (a control plane and a worker) on node
# image IMAGE (kindest/node:v1.36.3 or pykubelet/kind-node:v1.36.3, from build-kind-node.sh), the
# worker on WORKER_IMAGE if given (a pykubelet node joining a cluster of the real kubelet's, with
# kind's own `kubeadm join`), checked the way a user would, each step timed, then deleted:
#
#   kind create cluster   with the one patch this cgroup v1 machine needs (failCgroupV1: false)
#   every node Ready      and kube-system's and the CNI's pods Running and ready
#   kind load image-archive   the test bed's busybox, into every node
#   a pod on each node    Ready; `kubectl logs` shows its output; `kubectl exec` in one pings the
#                         other across nodes; `kubectl port-forward` reaches a port in a pod
#   kind delete cluster   and no container, volume or network of the cluster is left
#
# The cluster is deleted however the script ends; KIND_SMOKE_KEEP=1 keeps it (for a look inside).
# Prints one line per step with its seconds since the start; exits non-zero at the first failure.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 IMAGE [NAME [WORKER_IMAGE]]" >&2; exit 2; }
image=$1
name=${2:-smoke}
worker_image=${3:-$image}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
K8S_VERSION=${K8S_VERSION:-v1.36.3}
KIND=$CACHE/kind/bin/kind
KUBECTL=$CACHE/k8s/$K8S_VERSION/bin/kubectl
BUSYBOX_TAR=$(find "$CACHE/images" -maxdepth 1 -name 'busybox-1.36-*.tar' | head -n 1)
BUSYBOX=docker.io/library/busybox:1.36
export PATH=/usr/bin:$PATH  # kind runs `docker`: Debian's, the one docker.sh starts
t0=$(date +%s%N)
work=$(mktemp -d)
step() {
    local ms=$((($(date +%s%N) - t0) / 1000000))
    printf '[kind-smoke %s %4d.%01ds] %s\n' "$name" $((ms / 1000)) $((ms % 1000 / 100)) "$*"
}
fail() { step "FAILED: $*" >&2; exit 1; }
k() { "$KUBECTL" --kubeconfig "$work/kubeconfig" "$@"; }
cleanup() {
    [ -n "${KIND_SMOKE_KEEP:-}" ] || "$KIND" delete cluster --name "$name" >/dev/null 2>&1 || true
    [ -z "${forward_pid:-}" ] || kill "$forward_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
[ -n "$BUSYBOX_TAR" ] || fail "no busybox tar in $CACHE/images (tests/bed/images.py builds it)"

cat >"$work/cluster.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
nodes:
- role: control-plane
  image: $image
- role: worker
  image: $worker_image
EOF
volumes_before=$(docker volume ls -q | wc -l)
step "kind create cluster: control plane on $image, worker on $worker_image"
"$KIND" create cluster --name "$name" --config "$work/cluster.yaml" \
    --kubeconfig "$work/kubeconfig" 2>&1 | while IFS= read -r line; do step "  $line"; done
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "kind create cluster"
k wait --for=condition=Ready node --all --timeout=120s >/dev/null || { k get nodes -o wide; fail "nodes not Ready"; }
step "all nodes Ready: $(k get nodes --no-headers -o custom-columns=N:.metadata.name,V:.status.nodeInfo.kubeletVersion | tr -s ' ' | paste -sd, -)"
k wait --for=condition=Ready pod --all -n kube-system --timeout=120s >/dev/null &&
    k wait --for=condition=Ready pod --all -A -l app=flannel --timeout=60s >/dev/null ||
    { k get pods -A -o wide; fail "system pods not ready"; }
step "kube-system and CNI pods ready ($(k get pods -A --no-headers | wc -l) pods)"

"$KIND" load image-archive "$BUSYBOX_TAR" --name "$name" >/dev/null 2>&1 || fail "kind load image-archive"
step "kind load image-archive: $BUSYBOX on every node"

nodes=$(k get nodes -o jsonpath='{.items[*].metadata.name}')
for node in $nodes; do
    k run "bb-$node" --image="$BUSYBOX" --image-pull-policy=Never --restart=Never \
        --overrides="{\"spec\":{\"nodeName\":\"$node\"}}" -- \
        sh -c 'echo "hello from $(hostname)"; mkdir -p /www; echo served >/www/index.html; httpd -f -p 8080 -h /www' >/dev/null
done
# shellcheck disable=SC2046  # one word per pod
k wait --for=condition=Ready $(for n in $nodes; do echo "pod/bb-$n"; done) --timeout=60s >/dev/null ||
    { k get pods -o wide; fail "busybox pods not Ready"; }
step "a pod on each node Ready: $(k get pods --no-headers -o custom-columns=N:.metadata.name,IP:.status.podIP,NODE:.spec.nodeName | tr -s ' ' | paste -sd, -)"
# shellcheck disable=SC2086  # the node names, one word each
set -- $nodes
first=$1; last=${!#}
for node in $nodes; do
    out=$(k logs "bb-$node") && [ "$out" = "hello from bb-$node" ] || fail "kubectl logs bb-$node: '$out'"
done
step "kubectl logs: each pod's output"
ip=$(k get pod "bb-$last" -o jsonpath='{.status.podIP}')
k exec "bb-$first" -- ping -c 2 -W 2 "$ip" >/dev/null || fail "pod on $first cannot ping $ip (pod on $last)"
out=$(k exec "bb-$first" -- wget -q -O - "http://$ip:8080/") && [ "$out" = served ] || fail "wget $ip:8080 from $first: '$out'"
step "kubectl exec: the pod on $first reaches the pod on $last ($ip) by ping and HTTP"
k port-forward "pod/bb-$last" 18080:8080 >"$work/forward.log" 2>&1 &
forward_pid=$!
for _ in $(seq 50); do grep -q Forwarding "$work/forward.log" && break; sleep 0.2; done
out=$(curl -fsS --max-time 5 http://127.0.0.1:18080/) && [ "$out" = served ] || { cat "$work/forward.log"; fail "port-forward: '$out'"; }
kill "$forward_pid"; forward_pid=
step "kubectl port-forward: the pod on $last answers through it"

[ -z "${KIND_SMOKE_KEEP:-}" ] || { step "kept (KIND_SMOKE_KEEP): kubeconfig $work/kubeconfig is deleted on exit; use kind export kubeconfig --name $name"; exit 0; }
"$KIND" delete cluster --name "$name" >/dev/null 2>&1 || fail "kind delete cluster"
left=$(docker ps -a --filter "label=io.x-k8s.kind.cluster=$name" -q | wc -l)
[ "$left" -eq 0 ] || fail "$left containers of the cluster left"
volumes_after=$(docker volume ls -q | wc -l)
[ "$volumes_after" -le "$volumes_before" ] || fail "$((volumes_after - volumes_before)) volumes left"
step "kind delete cluster: no container or volume of it left (kind keeps its network 'kind' for the next cluster)"
