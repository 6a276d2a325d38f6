#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for pykubelet's tests and users:
# etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built from
# the pinned release by build-control-plane.sh and run as plain background
# processes (no systemd, no containers: the node agent under test owns the CRI).
#
#   cluster.sh up                            build if needed, start, wait until ready
#   cluster.sh down [--purge]                stop (--purge also drops the etcd data)
#   cluster.sh status                        what runs, and is it healthy
#   cluster.sh node-kubeconfig NODE OUT      client identity system:node:NODE for a node agent
#   cluster.sh bootstrap-token [--ttl SECONDS] [--group GROUP]
#                                            a new bootstrap token (printed), as `kubeadm token create`
#   cluster.sh bootstrap-kubeconfig TOKEN OUT  a kubeconfig for TLS bootstrap with that token
#
# Environment: PYKUBELET_CLUSTER_DIR (state; default <repo>/.cluster, git-ignored),
# PYKUBELET_API_PORT (6443), PYKUBELET_ETCD_PORT (2379; peer = +1),
# PYKUBELET_CM_PORT (10257), PYKUBELET_SCHED_PORT (10259), PYKUBELET_API_ADVERTISE_ADDRESS
# (10.250.0.1: the "kubernetes" Service's endpoint; see up), PYKUBELET_CLUSTER_CIDR
# (the pods' range nodes' podCIDRs come from, 10.244.0.0/16: a second cluster whose node shares
# this machine's network with the first one's needs another),
# PYKUBELET_CLUSTER_WAIT (seconds per readiness wait, 120), K8S_VERSION, PYKUBELET_CACHE.
#
# Pods reach the apiserver through the "kubernetes" Service, whose endpoint is the advertised
# address: `up` makes it an address of this machine alone (on lo) with a relay to the apiserver
# (relay.py: pods and this machine only), `down` removes both. Both need root.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/detach.sh"
repo="$(cd "$here/../.." && pwd)"
export K8S_VERSION=${K8S_VERSION:-v1.36.3}
BIN=${PYKUBELET_CACHE:-/var/cache/pykubelet}/k8s/$K8S_VERSION/bin
STATE=${PYKUBELET_CLUSTER_DIR:-$repo/.cluster}
PKI=$STATE/pki LOGS=$STATE/logs RUN=$STATE/run
API_PORT=${PYKUBELET_API_PORT:-6443}
ETCD_PORT=${PYKUBELET_ETCD_PORT:-2379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
CM_PORT=${PYKUBELET_CM_PORT:-10257}
SCHED_PORT=${PYKUBELET_SCHED_PORT:-10259}
WAIT=${PYKUBELET_CLUSTER_WAIT:-120}
SERVER=https://127.0.0.1:$API_PORT
ADVERTISE=${PYKUBELET_API_ADVERTISE_ADDRESS:-10.250.0.1}
SERVICE_CIDR=10.96.0.0/12
CLUSTER_CIDR=${PYKUBELET_CLUSTER_CIDR:-10.244.0.0/16}
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler apiserver-relay)
# The programs behind daemons that are not named after them (the others run $BIN/NAME).
declare -A PROGRAM=([apiserver-relay]=relay.py)
# Marks the address `up` puts on lo for $ADVERTISE (so `down` removes that one and no other).
ADVERTISE_LABEL=lo:pkl-api

say() { echo "cluster: $*" >&2; }
die() { echo "cluster: ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- PKI
# ECDSA P-256 everywhere: instant to generate, and every component (and
# Python's ssl) accepts it, including for service-account tokens (ES256).
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; chmod 600 "$1"; }

# issue NAME SUBJECT EXTENSIONS: NAME.key + NAME.crt signed by our CA.
issue() {
  local name=$1 subj=$2 ext=$3 ca=${CA:-ca}
  newkey "$PKI/$name.key"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr"
  # A random serial instead of ca.srl, so concurrent node-kubeconfig calls don't race.
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" \
    -set_serial "0x$(openssl rand -hex 15)" -days 3650 -out "$PKI/$name.crt" \
    -extfile <(printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n%s\n' "$ext") 2>/dev/null
  rm -f "$PKI/$name.csr"
}
client() { issue "$1" "$2" "extendedKeyUsage=clientAuth"; }

ensure_pki() {
  [[ -f $PKI/.done ]] && return
  say "generating PKI in $PKI"
  rm -rf "$PKI"; mkdir -p "$PKI"
  local ca
  for ca in ca front-proxy-ca; do
    newkey "$PKI/$ca.key"
    openssl req -x509 -new -key "$PKI/$ca.key" -subj "/CN=pykubelet-$ca" -days 3650 -out "$PKI/$ca.crt" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
  done
  issue apiserver "/CN=kube-apiserver" "extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
  # What the apiserver presents to kubelets for logs/exec/port-forward.
  client apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  client admin "/O=system:masters/CN=kubernetes-admin"
  client controller-manager "/CN=system:kube-controller-manager"
  client scheduler "/CN=system:kube-scheduler"
  # The request-header (front-proxy) CA is kubeadm's layout; without it the
  # controller-manager and scheduler log "missing content for CA bundle" forever.
  CA=front-proxy-ca client front-proxy-client "/CN=front-proxy-client"
  newkey "$PKI/sa.key"
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  touch "$PKI/.done"
}

# kubeconfig OUT USER CERT KEY: self-contained (embedded data), so it can be
# moved; replaced atomically, since tests may read it while `up` re-runs.
kubeconfig() {
  local b64="base64 -w0"
  cat >"$1.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: pykubelet
  cluster:
    server: $SERVER
    certificate-authority-data: $($b64 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $($b64 "$3")
    client-key-data: $($b64 "$4")
contexts:
- name: $2@pykubelet
  context: {cluster: pykubelet, user: $2}
current-context: $2@pykubelet
EOF
  chmod 600 "$1.tmp"; mv -f "$1.tmp" "$1"
}

# ---------------------------------------------------------------- processes
# A PID file only counts if that PID still runs the same program (PIDs get reused): the
# program is the command's first word, or for a Python script its second.
pid_of() {
  local f=$RUN/$1.pid program=${PROGRAM[$1]:-$1} pid argv
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  mapfile -d '' -n 2 argv 2>/dev/null <"/proc/$pid/cmdline" || return 1
  [[ ${argv[0]:-} ]] || return 1  # it exited (a zombie has no command line)
  [[ ${argv[0]##*/} == "$program" || (${argv[0]##*/} == python* && ${argv[1]:-} == */"$program") ]] && echo "$pid"
}

# start NAME PORT ARGS...: $BIN/NAME, unless it already runs.
start() {
  local name=$1 port=$2; shift 2
  launch "$name" "sport = :$port" "$BIN/$name" "$@"
}

# launch NAME LISTENER COMMAND...: unless NAME already runs. A foreign listener (what the ss
# filter LISTENER finds) would answer our readiness probe while our process dies, so refuse it.
launch() {
  local name=$1 listener=$2; shift 2
  pid_of "$name" >/dev/null && return
  [[ -z $(ss -Hltn "$listener") ]] || die "$listener is taken: $(ss -Hltnp "$listener" | grep -o 'users:.*')"
  say "starting $name"
  detach "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
  local pid=$! i
  echo "$pid" >"$RUN/$name.pid"
  # Until the subshell has exec'd the program, the PID's command line is the shell's or setsid's,
  # and pid_of (so wait_for) would take a slow start on a busy machine for an exit.
  for ((i = 0; i < 100; i++)); do
    { pid_of "$name" >/dev/null || ! kill -0 "$pid" 2>/dev/null; } && break
    sleep 0.1
  done
}

# wait_for NAME CMD...: poll CMD until it succeeds, NAME dies, or the deadline passes.
wait_for() {
  local name=$1; shift
  local deadline=$((SECONDS + WAIT))
  until "$@" >/dev/null 2>&1; do
    if ! pid_of "$name" >/dev/null; then
      tail -n 20 "$LOGS/$name.log" >&2; die "$name exited (log: $LOGS/$name.log)"
    fi
    ((SECONDS < deadline)) || { tail -n 20 "$LOGS/$name.log" >&2; die "$name not ready after ${WAIT}s"; }
    sleep 0.5
  done
}

etcd_ok() { curl -sf --max-time 5 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
api_ok() { [[ $("$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" --request-timeout 5s get --raw /readyz 2>/dev/null) == ok ]]; }
healthz_ok() { [[ $(curl -sk --max-time 5 "https://$2:$1/healthz") == ok ]]; }

# $ADVERTISE as an address of this machine alone: on lo, so a pod's packets to it (from the pod
# bridge) are delivered here and no other host has a route to it. One already local (an address
# of this machine's, or the one an earlier `up` added) is left as it is.
advertise_address_up() {
  [[ $(ip -o route get "$ADVERTISE" 2>/dev/null) == local* ]] && return
  ip addr add "$ADVERTISE/32" dev lo label "$ADVERTISE_LABEL"
}

# Only the address `up` added, and only once nothing listens on it (another cluster's relay).
advertise_address_down() {
  [[ -n $(ip -o addr show dev lo label "$ADVERTISE_LABEL" to "$ADVERTISE/32" 2>/dev/null) ]] || return 0
  if [[ -n $(ss -Hltn "src $ADVERTISE") ]]; then say "leaving $ADVERTISE on lo: another relay listens on it"; return 0; fi
  say "removing $ADVERTISE from lo"
  ip addr del "$ADVERTISE/32" dev lo label "$ADVERTISE_LABEL"
}

up() {
  bash "$here/build-control-plane.sh"
  mkdir -p "$LOGS" "$RUN" "$STATE/bin" "$STATE/etcd"
  chmod 700 "$STATE/etcd"
  ln -sfn "$BIN/kubectl" "$STATE/bin/kubectl"
  ensure_pki
  kubeconfig "$STATE/admin.kubeconfig" admin "$PKI/admin.crt" "$PKI/admin.key"
  kubeconfig "$STATE/controller-manager.kubeconfig" system:kube-controller-manager "$PKI/controller-manager.crt" "$PKI/controller-manager.key"
  kubeconfig "$STATE/scheduler.kubeconfig" system:kube-scheduler "$PKI/scheduler.crt" "$PKI/scheduler.key"
  local t0=$SECONDS peer=http://127.0.0.1:$ETCD_PEER_PORT

  start etcd "$ETCD_PORT" --name default --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "default=$peer"
  wait_for etcd etcd_ok

  # Listens on loopback only, but advertises $ADVERTISE: the "kubernetes"
  # Service's endpoint (Endpoints may not hold a loopback IP), which a relay
  # (tests/bed/relay.py) forwards to loopback, so pods reach the apiserver at
  # 10.96.0.1 through a proxy (`pykubelet proxy`, kube-proxy). Below, on this
  # machine, for the pods of nodes in its own network namespace; the multi-node
  # test bed gives the same address to its LAN's namespace, with a relay of its own.
  # InternalIP first: the default (Hostname first) makes logs/exec do a DNS
  # lookup of the node name.
  # (Its port check looks at loopback only: the relay below listens on the same port at $ADVERTISE,
  # and outlives an apiserver killed by a test.)
  launch kube-apiserver "src 127.0.0.1 and sport = :$API_PORT" "$BIN/kube-apiserver" --bind-address 127.0.0.1 --secure-port "$API_PORT" --advertise-address "$ADVERTISE" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=true \
    --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --enable-bootstrap-token-auth \
    --kubelet-preferred-address-types InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP
  wait_for kube-apiserver api_ok

  # Pods (the cluster CIDR) and this machine reach it there; the relay turns away anyone else.
  if advertise_address_up; then
    launch apiserver-relay "src $ADVERTISE and sport = :$API_PORT" python3 "$here/relay.py" \
      --listen "$ADVERTISE:$API_PORT" --to "127.0.0.1:$API_PORT" --allow "$CLUSTER_CIDR"
    wait_for apiserver-relay healthz_ok "$API_PORT" "$ADVERTISE"
  else
    say "WARNING: cannot put $ADVERTISE on lo (root needed): pods will not reach the kubernetes Service"
  fi

  # One instance of each: leader election would only add a lease wait after an unclean stop.
  local cm=$STATE/controller-manager.kubeconfig sched=$STATE/scheduler.kubeconfig
  start kube-controller-manager "$CM_PORT" --bind-address 127.0.0.1 --secure-port "$CM_PORT" --leader-elect=false \
    --kubeconfig "$cm" --authentication-kubeconfig "$cm" --authorization-kubeconfig "$cm" \
    --controllers '*,bootstrapsigner,tokencleaner' --use-service-account-credentials \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --allocate-node-cidrs --cluster-cidr "$CLUSTER_CIDR" --node-cidr-mask-size 24 \
    --service-cluster-ip-range "$SERVICE_CIDR" --node-monitor-grace-period 40s
  start kube-scheduler "$SCHED_PORT" --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false \
    --kubeconfig "$sched" --authentication-kubeconfig "$sched" --authorization-kubeconfig "$sched"
  wait_for kube-controller-manager healthz_ok "$CM_PORT" 127.0.0.1
  wait_for kube-scheduler healthz_ok "$SCHED_PORT" 127.0.0.1
  # pykubelet agents that own the pod network read every Node to route to its pods.
  "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" apply -f "$repo/cni/node-network-rbac.yaml" >/dev/null
  # TLS bootstrap as kubeadm sets it up (bootstrap tokens, CSR auto-approval).
  "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" apply -f "$here/bootstrap-rbac.yaml" >/dev/null
  say "ready in $((SECONDS - t0))s: export KUBECONFIG=$STATE/admin.kubeconfig; $STATE/bin/kubectl get nodes"
}

# stop NAMES...: SIGTERM them together, SIGKILL whatever is left after 20s.
stop() {
  local name pid pids=() t0=$SECONDS
  for name in "$@"; do
    if pid=$(pid_of "$name"); then say "stopping $name ($pid)"; kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
  done
  for pid in "${pids[@]}"; do
    while [[ -d /proc/$pid ]] && ((SECONDS < t0 + 20)); do sleep 0.2; done
    if [[ -d /proc/$pid ]]; then say "pid $pid ignored SIGTERM; SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  done
  for name in "$@"; do rm -f "$RUN/$name.pid"; done
}

down() {
  # Clients before the apiserver before its storage, so none of them spends
  # its shutdown retrying a dependency that is already gone.
  stop kube-scheduler kube-controller-manager apiserver-relay
  advertise_address_down
  stop kube-apiserver
  stop etcd
  if [[ ${1:-} == --purge ]]; then say "removing etcd data"; rm -rf "$STATE/etcd"; fi
}

status() {
  local name pid rc=0
  for name in "${COMPONENTS[@]}"; do
    if pid=$(pid_of "$name"); then echo "$name: running (pid $pid)"; else echo "$name: stopped"; rc=1; fi
  done
  probe() { local what=$1; shift; if "$@"; then echo "$what: healthy"; else echo "$what: NOT healthy"; rc=1; fi; }
  probe etcd etcd_ok
  probe "kube-apiserver ($SERVER)" api_ok
  probe "kube-apiserver for pods (https://$ADVERTISE:$API_PORT)" healthz_ok "$API_PORT" "$ADVERTISE"
  probe kube-controller-manager healthz_ok "$CM_PORT" 127.0.0.1
  probe kube-scheduler healthz_ok "$SCHED_PORT" 127.0.0.1
  return $rc
}

# A node agent authenticates as system:node:NODE in group system:nodes: the
# identity the Node authorizer and the NodeRestriction admission plugin expect.
node_kubeconfig() {
  local node=${1:?usage: cluster.sh node-kubeconfig NODE OUT} out=${2:?usage: cluster.sh node-kubeconfig NODE OUT}
  [[ $node =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]] || die "invalid node name: $node"
  ensure_pki
  mkdir -p "$PKI/nodes"
  client "nodes/$node" "/O=system:nodes/CN=system:node:$node"
  kubeconfig "$out" "system:node:$node" "$PKI/nodes/$node.crt" "$PKI/nodes/$node.key"
  say "wrote $out for system:node:$node"
}

# A bootstrap token Secret in kube-system, as `kubeadm token create` makes it (default TTL 24h,
# group system:bootstrappers:kubeadm:default-node-token); a negative TTL makes an expired one.
bootstrap_token() {
  local ttl=86400 group=system:bootstrappers:kubeadm:default-node-token
  while [[ $# -gt 0 ]]; do
    case $1 in
      --ttl) ttl=$2; shift 2 ;;
      --group) group=$2; shift 2 ;;
      *) die "bootstrap-token: unknown option $1" ;;
    esac
  done
  local id secret expiration
  id=$(tr -dc 'a-z0-9' </dev/urandom | head -c 6) || true
  secret=$(tr -dc 'a-z0-9' </dev/urandom | head -c 16) || true
  expiration=$(date -u -d "@$(($(date +%s) + ttl))" +%Y-%m-%dT%H:%M:%SZ)
  "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata: {name: bootstrap-token-$id, namespace: kube-system}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: "$id"
  token-secret: "$secret"
  expiration: "$expiration"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: "$group"
EOF
  echo "$id.$secret"
}

# What kubeadm join writes as /etc/kubernetes/bootstrap-kubelet.conf: the cluster and the token.
bootstrap_kubeconfig() {
  local token=${1:?usage: cluster.sh bootstrap-kubeconfig TOKEN OUT} out=${2:?usage: cluster.sh bootstrap-kubeconfig TOKEN OUT}
  cat >"$out.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: pykubelet
  cluster:
    server: $SERVER
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: tls-bootstrap-token-user
  user:
    token: $token
contexts:
- name: tls-bootstrap-token-user@pykubelet
  context: {cluster: pykubelet, user: tls-bootstrap-token-user}
current-context: tls-bootstrap-token-user@pykubelet
EOF
  chmod 600 "$out.tmp"; mv -f "$out.tmp" "$out"
}

case ${1:-} in
  up) up ;;
  down) down "${2:-}" ;;
  status) status ;;
  node-kubeconfig) shift; node_kubeconfig "$@" ;;
  bootstrap-token) shift; bootstrap_token "$@" ;;
  bootstrap-kubeconfig) shift; bootstrap_kubeconfig "$@" ;;
  *) sed -n '7,14s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
