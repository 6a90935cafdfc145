# shellcheck shell=bash
# The local Kubernetes clusters (sourced by stack.sh): one etcd shared by every cluster, and per cluster a
# kube-apiserver (its own --etcd-prefix and port), a kube-controller-manager and a KWOK that plays the
# kubelets of every Node (fake nodes turn Ready; bound pods turn Running; deleted pods go away).
#
# Choices, each for a reason:
# - admission ServiceAccount off: no token controller and no per-namespace wait for the default account;
# - admission TaintNodesByCondition off: it puts node.kubernetes.io/not-ready:NoSchedule on every new Node and
#   only the node-lifecycle controller (not run here) would lift it;
# - controllers: deployment/replicaset (owners recreate evicted pods), disruption (computes PDB status; without
#   it every eviction under a PDB is refused), garbage-collector, namespace, pod-garbage-collector (pods left on
#   deleted nodes), serviceaccount (default accounts, for manifests that name one);
# - RBAC on (Node,RBAC), so deploy/k8s/rbac.yaml can be checked for real; priority-and-fairness off (tests).

ETCD_DIR=$STACK_DIR/etcd
KCM_CONTROLLERS=deployment-controller,replicaset-controller,disruption-controller,garbage-collector-controller
KCM_CONTROLLERS+=,namespace-controller,pod-garbage-collector-controller,serviceaccount-controller

_etcd_ready() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }

start_etcd() {
  already_running etcd _etcd_ready && return
  claim_port etcd "$ETCD_PORT"
  claim_port etcd "$ETCD_PEER_PORT"
  say "etcd $ETCD_VERSION: starting on 127.0.0.1:$ETCD_PORT"
  start_bg etcd "$ETCD_BIN" --name gpuplace --data-dir "$ETCD_DIR" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "gpuplace=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true --log-level=warn
}

wait_etcd() {
  wait_until 60 etcd _etcd_ready
  say "etcd: up"
}

start_apiserver() {
  local cluster=$1 name=kube-apiserver-$1 port
  port=$(apiserver_port "$cluster")
  write_kubeconfig "$cluster"
  already_running "$name" kube_get "$cluster" /readyz && return
  claim_port "$name" "$port"
  say "$name $KUBE_VERSION: starting on 127.0.0.1:$port (etcd prefix /registry-$cluster)"
  start_bg "$name" "$KUBE_BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --etcd-prefix="/registry-$cluster" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
    --tls-cert-file="$PKI_DIR/apiserver.crt" --tls-private-key-file="$PKI_DIR/apiserver.key" \
    --client-ca-file="$PKI_DIR/ca.crt" \
    --service-account-issuer="https://127.0.0.1:$port" \
    --service-account-key-file="$PKI_DIR/sa.pub" --service-account-signing-key-file="$PKI_DIR/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=Node,RBAC \
    --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
    --enable-priority-and-fairness=false --profiling=false --allow-privileged=true \
    --cert-dir="$STACK_DIR/kube/$cluster/apiserver"
}

wait_apiserver() {
  wait_until 180 "kube-apiserver-$1" kube_get "$1" /readyz
  say "kube-apiserver-$1: ready (https://127.0.0.1:$(apiserver_port "$1"))"
}

_kcm_ready() { curl -kfsS --max-time 2 "https://127.0.0.1:$(kcm_port "$1")/healthz"; }

start_kcm() {
  local cluster=$1 name=kube-controller-manager-$1 port kubeconfig
  port=$(kcm_port "$cluster")
  kubeconfig=$(kubeconfig_of "$cluster")
  already_running "$name" _kcm_ready "$cluster" && return
  claim_port "$name" "$port"
  say "$name: starting (controllers: ${KCM_CONTROLLERS//-controller/})"
  start_bg "$name" "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig="$kubeconfig" \
    --leader-elect=false --controllers="$KCM_CONTROLLERS" \
    --bind-address=127.0.0.1 --secure-port="$port" --cert-dir="$STACK_DIR/kube/$cluster/controller-manager" \
    --profiling=false
}

wait_kcm() {
  wait_until 120 "kube-controller-manager-$1" _kcm_ready "$1"
  say "kube-controller-manager-$1: healthy"
}

_kwok_ready() { curl -fsS --max-time 2 "http://127.0.0.1:$(kwok_port "$1")/healthz"; }

start_kwok() {
  local cluster=$1 name=kwok-$1 port
  port=$(kwok_port "$cluster")
  already_running "$name" _kwok_ready "$cluster" && return
  claim_port "$name" "$port"
  say "$name $KWOK_VERSION: starting (manages every Node of $cluster)"
  start_bg "$name" "$KWOK_BIN" --kubeconfig="$(kubeconfig_of "$cluster")" --manage-all-nodes=true \
    --server-address="127.0.0.1:$port" --node-lease-duration-seconds=40
}

wait_kwok() {
  wait_until 60 "kwok-$1" _kwok_ready "$1"
  say "kwok-$1: healthy"
}

etcd_healthy() { pid_of etcd >/dev/null && _etcd_ready; }
apiserver_healthy() { pid_of "kube-apiserver-$1" >/dev/null && kube_get "$1" /readyz; }
kcm_healthy() { pid_of "kube-controller-manager-$1" >/dev/null && _kcm_ready "$1"; }
kwok_healthy() { pid_of "kwok-$1" >/dev/null && _kwok_ready "$1"; }
