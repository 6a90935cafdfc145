#!/usr/bin/env bash
# The real local stack on 127.0.0.1, no Docker engine: Apache Kafka (KRaft), PostgreSQL, one etcd, and per
# cluster (GPUPLACE_STACK_CLUSTERS, default "east west") a kube-apiserver, a kube-controller-manager, a
# kube-scheduler and KWOK.
#
#   stack.sh up                 build what is missing (cached in .cache/stack), start what is not running, wait
#                               until healthy, write $GPUPLACE_STACK_DIR/env; a second `up` only checks health
#   stack.sh down               stop every process `up` started (by process group) and delete the runtime dir
#   stack.sh status             each component up/down (exit status 3 when something is down)
#   stack.sh restart NAME       stop and start kafka or postgres (fault tests, a changed Kafka configuration,
#                               a rotated Kafka password: then `up` again to rewrite the env file)
#   stack.sh apiserver NAME PORT [FLAG...]
#                               one more kube-apiserver on the stack's etcd (prefix /registry-NAME) and
#                               certificates, in the foreground, FLAGs added (tests: an API group turned off)
#   stack.sh logs [-f] [NAME]   tail the logs (NAME: postgres, kafka, etcd, east, kube-apiserver-west,
#                               kube-scheduler-east, ...)
#
# Settings (environment): GPUPLACE_STACK_DIR (runtime data, default /tmp/gpuplace-stack), GPUPLACE_STACK_CLUSTERS,
# GPUPLACE_STACK_CACHE (builds, default <repo>/.cache/stack), GPUPLACE_STACK_PG_PASSWORD, GPUPLACE_STACK_PG_BIN,
# GPUPLACE_STACK_{PG,KAFKA,ETCD,APISERVER,KCM,SCHEDULER,KWOK}_PORT, GPUPLACE_STACK_SCHEDULER_{QPS,BURST}
# (kube-scheduler's client rate limit, default 50/100 as upstream). Pinned versions live in
# deploy/local/{kafka/pom.xml,etcd/go.mod,kube/go.mod,kwok/go.mod}.
set -euo pipefail
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"

LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib
# shellcheck source=lib/common.sh
source "$LIB/common.sh"
# shellcheck source=lib/build.sh
source "$LIB/build.sh"
# shellcheck source=lib/pki.sh
source "$LIB/pki.sh"
# shellcheck source=lib/postgres.sh
source "$LIB/postgres.sh"
# shellcheck source=lib/kafka.sh
source "$LIB/kafka.sh"
# shellcheck source=lib/kube.sh
source "$LIB/kube.sh"

write_env() {
  local file=$STACK_DIR/env c user
  umask 077 # it holds the database and Kafka passwords of the local stack
  {
    echo "# Written by deploy/local/stack.sh up. Source it: . $STACK_DIR/env"
    printf 'export GPUPLACE_STACK_DIR=%q\n' "$STACK_DIR"
    printf 'export GPUPLACE_STACK_CLUSTERS=%q\n' "${CLUSTER_LIST[*]}"
    # Kafka as its admin (tests, tools, `gpuplace topics`); each service's own password for the harnesses
    # that start services as their own users (harness/kafka_users.kafka_env)
    printf 'export GPUPLACE_KAFKA_BOOTSTRAP=%q\n' "127.0.0.1:$KAFKA_PORT"
    printf 'export GPUPLACE_KAFKA_SECURITY_PROTOCOL=SASL_SSL\n'
    printf 'export GPUPLACE_KAFKA_SASL_MECHANISM=PLAIN\n'
    printf 'export GPUPLACE_KAFKA_USERNAME=%q\n' "$KAFKA_ADMIN_USER"
    printf 'export GPUPLACE_KAFKA_PASSWORD=%q\n' "$(kafka_password "$KAFKA_ADMIN_USER")"
    printf 'export GPUPLACE_KAFKA_CA_FILE=%q\n' "$PKI_DIR/ca.crt"
    for user in "${KAFKA_SERVICE_USERS[@]}"; do
      printf 'export GPUPLACE_STACK_KAFKA_PASSWORD_%s=%q\n' "$(tr a-z- A-Z_ <<<"$user")" "$(kafka_password "$user")"
    done
    printf 'export GPUPLACE_DATABASE_URL=%q\n' "$(postgres_url)"
    printf 'export GPUPLACE_STACK_HELM=%q\n' "$HELM_BIN"
    printf 'export GPUPLACE_STACK_KUBE_SCHEDULER=%q\n' "$KUBE_BIN/kube-scheduler" # bench pipeline --against
    printf 'export KUBECONFIG=%q\n' "$(kubeconfig_of "${CLUSTER_LIST[0]}")"
    for c in "${CLUSTER_LIST[@]}"; do
      printf 'export GPUPLACE_KUBECONFIG_%s=%q\n' "${c^^}" "$(kubeconfig_of "$c")"
    done
  } >"$file.tmp"
  mv "$file.tmp" "$file"
}

cmd_up() {
  local c
  validate_clusters
  mkdir -p "$STACK_DIR" "$PIDS_DIR" "$LOGS_DIR"
  chmod 755 "$STACK_DIR"
  touch "$MARKER"
  say "stack up: runtime dir $STACK_DIR, clusters: ${CLUSTER_LIST[*]}"
  build_all
  say "builds ready: kafka $KAFKA_VERSION, etcd $ETCD_VERSION, kubernetes $KUBE_VERSION, kwok $KWOK_VERSION, helm $HELM_VERSION"
  ensure_pki
  start_postgres
  start_etcd
  start_kafka
  wait_etcd
  for c in "${CLUSTER_LIST[@]}"; do start_apiserver "$c"; done
  wait_postgres
  wait_kafka
  for c in "${CLUSTER_LIST[@]}"; do wait_apiserver "$c"; done
  # where cluster-watchers elect their leader by default (GPUPLACE_LEADER_ELECTION_NAMESPACE), as
  # deploy/k8s/rbac.yaml creates it on a real cluster: `gpuplace up` and `gpuplace service` run as they are
  for c in "${CLUSTER_LIST[@]}"; do ensure_namespace "$c" gpuplace; done
  for c in "${CLUSTER_LIST[@]}"; do
    start_kcm "$c"
    start_scheduler "$c"
    start_kwok "$c"
  done
  for c in "${CLUSTER_LIST[@]}"; do
    wait_kcm "$c"
    wait_scheduler "$c"
    wait_kwok "$c"
  done
  write_env
  say "stack up; environment: . $STACK_DIR/env"
}

cmd_down() {
  local c file
  if [[ ! -d $STACK_DIR ]]; then
    say "stack down: nothing at $STACK_DIR"
    return
  fi
  [[ -f $MARKER ]] || die "$STACK_DIR has no $(basename "$MARKER") marker: not a stack runtime dir, not touching it"
  say "stack down: $STACK_DIR"
  # etcd last, so the apiservers shut down cleanly; the rest at once.
  local first=(kafka postgres) leftovers=()
  for c in "${CLUSTER_LIST[@]}"; do
    first+=("kwok-$c" "kube-scheduler-$c" "kube-controller-manager-$c" "kube-apiserver-$c")
  done
  stop_groups "${first[@]}"
  stop_groups etcd
  # Components of clusters no longer listed in GPUPLACE_STACK_CLUSTERS.
  for file in "$PIDS_DIR"/*.pid; do
    [[ -f $file ]] && leftovers+=("$(basename "$file" .pid)")
  done
  ((${#leftovers[@]} == 0)) || stop_groups "${leftovers[@]}"
  rm -rf "$STACK_DIR"
  say "stack down: removed $STACK_DIR"
}

# _status_line NAME ADDRESS CHECK...: print one component's state; return 1 when it is down.
_status_line() {
  local name=$1 address=$2 state=up pid
  shift 2
  "$@" >/dev/null 2>&1 || state=down
  pid=$(pid_of "$name" 2>/dev/null) || pid=-
  printf '%-32s %-5s pid %-8s %s\n' "$name" "$state" "$pid" "$address"
  [[ $state == up ]]
}

cmd_status() {
  local c down=0
  validate_clusters
  _status_line postgres "127.0.0.1:$PG_PORT" postgres_healthy || down=1
  _status_line kafka "127.0.0.1:$KAFKA_PORT" kafka_healthy || down=1
  _status_line etcd "127.0.0.1:$ETCD_PORT" etcd_healthy || down=1
  for c in "${CLUSTER_LIST[@]}"; do
    _status_line "kube-apiserver-$c" "https://127.0.0.1:$(apiserver_port "$c")" apiserver_healthy "$c" || down=1
    _status_line "kube-controller-manager-$c" "https://127.0.0.1:$(kcm_port "$c")" kcm_healthy "$c" || down=1
    _status_line "kube-scheduler-$c" "https://127.0.0.1:$(scheduler_port "$c")" scheduler_healthy "$c" || down=1
    _status_line "kwok-$c" "http://127.0.0.1:$(kwok_port "$c")" kwok_healthy "$c" || down=1
  done
  if [[ -f $STACK_DIR/env ]]; then echo "environment: . $STACK_DIR/env"; fi
  return $((down ? 3 : 0))
}

# cmd_restart NAME: stop one component by its process group and start it as `up` would (fault tests, the
# chaos bench, a new Kafka listener configuration).
cmd_restart() {
  case ${1:-} in
    kafka) stop_groups kafka && fetch_kafka && start_kafka && wait_kafka ;;
    postgres) stop_groups postgres && start_postgres && wait_postgres ;;
    *) die "restart: name kafka or postgres" ;;
  esac
}

cmd_logs() {
  local follow=() pattern='' files=()
  [[ ${1:-} == -f ]] && { follow=(-F); shift; }
  pattern=${1:-}
  [[ -d $LOGS_DIR ]] || die "no logs at $LOGS_DIR (stack not up?)"
  mapfile -t files < <(find "$LOGS_DIR" -name "*${pattern}*.log" | sort)
  ((${#files[@]})) || die "no log matches '$pattern' in $LOGS_DIR"
  tail -n "${GPUPLACE_STACK_LOG_LINES:-100}" "${follow[@]}" "${files[@]}"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  logs) shift; cmd_logs "$@" ;;
  restart) shift; cmd_restart "$@" ;;
  apiserver) shift; build_kube; run_apiserver "$@" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
