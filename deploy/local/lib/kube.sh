# shellcheck shell=bash
# The local Kubernetes clusters (sourced by stack.sh): one etcd shared by every cluster, and per cluster a
# kube-apiserver (its own --etcd-prefix and port), a kube-controller-manager, a kube-scheduler (binds the pods
# of the default scheduler, next to gpuplace's) and a KWOK that plays the kubelets of every Node (fake nodes
# turn Ready; bound pods turn Running; deleted pods go away).
#
# Choices, each for a reason:
# - admission ServiceAccount off: no token controller and no per-namespace wait for the default account;
# - admission TaintNodesByCondition off: it puts node.kubernetes.io/not-ready:NoSchedule on every new Node and
#   only the node-lifecycle controller (not run here) would lift it;
# - controllers: deployment/replicaset (owners recreate evicted pods), disruption (computes PDB status; without
#   it every eviction under a PDB is refused), garbage-collector, namespace, pod-garbage-collector (pods left on
#   deleted nodes), serviceaccount (default accounts, for manifests that name one);
# - RBAC on (Node,RBAC), so deploy/k8s/rbac.yaml can be checked for real; priority-and-fairness off (tests);
# - kube-controller-manager and kube-scheduler with leader election off: one of each per cluster, so a Lease
#   would only add a write every 2 s and, after a restart, a wait for the dead holder's lease to expire;
# - kube-scheduler's client QPS/burst (GPUPLACE_STACK_SCHEDULER_QPS/_BURST) default to upstream's 50/100, so
#   the default scheduler binds no faster than a stock one; raise them to take its rate limit out of the way.

ETCD_DIR=$STACK_DIR/etcd
KCM_CONTROLLERS=deployment-controller,replicaset-controller,disruption-controller,garbage-collector-controller
KCM_CONTROLLERS+=,namespace-controller,pod-garbage-collector-controller,serviceaccount-controller
# resourceclaim: creates the claims of ResourceClaimTemplates and drops deleted pods from reservedFor (DRA)
KCM_CONTROLLERS+=,resourceclaim-controller
SCHEDULER_QPS=${GPUPLACE_STACK_SCHEDULER_QPS:-50}
SCHEDULER_BURST=${GPUPLACE_STACK_SCHEDULER_BURST:-100}

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

# apiserver_args NAME PORT: kube-apiserver's flags for a cluster NAME on PORT (etcd prefix /registry-NAME).
# --endpoint-reconciler-type=none: since v1.37 the apiserver refuses a loopback advertise address with the lease
# reconciler of the `kubernetes` Service's endpoints ("may not be in the loopback range"); nothing here uses them.
apiserver_args() {
  local cluster=$1 port=$2
  printf '%s\n' \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --etcd-prefix="/registry-$cluster" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
    --tls-cert-file="$PKI_DIR/apiserver.crt" --tls-private-key-file="$PKI_DIR/apiserver.key" \
    --client-ca-file="$PKI_DIR/ca.crt" \
    --service-account-issuer="https://127.0.0.1:$port" \
    --service-account-key-file="$PKI_DIR/sa.pub" --service-account-signing-key-file="$PKI_DIR/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --endpoint-reconciler-type=none \
    --authorization-mode=Node,RBAC \
    --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
    --enable-priority-and-fairness=false --profiling=false --allow-privileged=true \
    --cert-dir="$STACK_DIR/kube/$cluster/apiserver"
}

start_apiserver() {
  local cluster=$1 name=kube-apiserver-$1 port args
  port=$(apiserver_port "$cluster")
  write_kubeconfig "$cluster"
  already_running "$name" kube_get "$cluster" /readyz && return
  claim_port "$name" "$port"
  say "$name $KUBE_VERSION: starting on 127.0.0.1:$port (etcd prefix /registry-$cluster)"
  mapfile -t args < <(apiserver_args "$cluster" "$port")
  start_bg "$name" "$KUBE_BIN/kube-apiserver" "${args[@]}"
}

# run_apiserver NAME PORT [FLAG...]: one more kube-apiserver on the running stack's etcd and certificates, in the
# foreground (its caller stops it), with the stack's flags, each FLAG replacing the one of its name, and its
# admin kubeconfig at $STACK_DIR/kube/NAME/kubeconfig. For tests that need an apiserver configured otherwise
# (an API group turned off with --runtime-config) without restarting the shared ones.
run_apiserver() {
  local cluster=$1 port=$2 args c flag i
  shift 2
  [[ $cluster =~ ^[a-z0-9][-a-z0-9]*$ && $port =~ ^[0-9]+$ ]] || die "apiserver: NAME (a DNS label) and PORT"
  for c in "${CLUSTER_LIST[@]}"; do [[ $c != "$cluster" ]] || die "apiserver: $cluster is one of the stack's"; done
  [[ -f $PKI_DIR/.complete ]] || die "apiserver: no certificates at $PKI_DIR (stack not up?)"
  write_kubeconfig "$cluster" "$port"
  mapfile -t args < <(apiserver_args "$cluster" "$port")
  for flag in "$@"; do # a FLAG replaces the stack's flag of its name (some, like --authorization-mode, add up)
    for i in "${!args[@]}"; do [[ ${args[i]%%=*} != "${flag%%=*}" ]] || unset 'args[i]'; done
  done
  exec "$KUBE_BIN/kube-apiserver" "${args[@]}" "$@"
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

_scheduler_ready() { curl -kfsS --max-time 2 "https://127.0.0.1:$(scheduler_port "$1")/healthz"; }

# _write_scheduler_config CLUSTER FILE: the KubeSchedulerConfiguration kube-scheduler runs with. The settings
# live there, not in flags: kube-scheduler's --kubeconfig, --kube-api-qps/-burst and --profiling are deprecated
# (each start logs a warning) in favour of this file.
_write_scheduler_config() {
  local file=$2
  [[ $SCHEDULER_QPS =~ ^[0-9]+(\.[0-9]+)?$ && $SCHEDULER_BURST =~ ^[0-9]+$ ]] ||
    die "GPUPLACE_STACK_SCHEDULER_QPS ('$SCHEDULER_QPS') must be a number, _BURST ('$SCHEDULER_BURST') an integer"
  cat >"$file.tmp" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "$(kubeconfig_of "$1")"
  qps: $SCHEDULER_QPS
  burst: $SCHEDULER_BURST
leaderElection:
  leaderElect: false
enableProfiling: false
enableContentionProfiling: false
EOF
  mv "$file.tmp" "$file"
}

start_scheduler() {
  local cluster=$1 name=kube-scheduler-$1 port config=$STACK_DIR/kube/$1/scheduler.yaml
  port=$(scheduler_port "$cluster")
  already_running "$name" _scheduler_ready "$cluster" && return
  claim_port "$name" "$port"
  _write_scheduler_config "$cluster" "$config"
  say "$name: starting (client qps $SCHEDULER_QPS, burst $SCHEDULER_BURST)"
  start_bg "$name" "$KUBE_BIN/kube-scheduler" --config="$config" \
    --bind-address=127.0.0.1 --secure-port="$port" --cert-dir="$STACK_DIR/kube/$cluster/scheduler"
}

wait_scheduler() {
  wait_until 120 "kube-scheduler-$1" _scheduler_ready "$1"
  say "kube-scheduler-$1: healthy"
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
scheduler_healthy() { pid_of "kube-scheduler-$1" >/dev/null && _scheduler_ready "$1"; }
kwok_healthy() { pid_of "kwok-$1" >/dev/null && _kwok_ready "$1"; }
