# shellcheck shell=bash
# Shared settings and process helpers of the local stack (sourced by stack.sh).
#
# Rules: every service listens on 127.0.0.1 only; every process is started in its own session (setsid), so
# its PID is also its process-group id and `down` stops it and all its children by that id, never by name;
# runtime data lives in $STACK_DIR, outside the repository; builds live in $CACHE_DIR, inside it but ignored.

LOCAL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_DIR=$(cd "$LOCAL_DIR/../.." && pwd)

STACK_DIR=${GPUPLACE_STACK_DIR:-/tmp/gpuplace-stack}
CACHE_DIR=${GPUPLACE_STACK_CACHE:-$REPO_DIR/.cache/stack}
CLUSTERS=${GPUPLACE_STACK_CLUSTERS:-east west}
read -r -a CLUSTER_LIST <<<"$CLUSTERS"

# Default ports sit below Linux's ephemeral range (32768-60999): a listener there can find its port taken by
# the local end of some client connection (seen: Kafka failing to bind while tests churned connections).
PG_PORT=${GPUPLACE_STACK_PG_PORT:-25432}
PG_USER=gpuplace
PG_DB=gpuplace
PG_PASSWORD=${GPUPLACE_STACK_PG_PASSWORD:-gpuplace}
KAFKA_PORT=${GPUPLACE_STACK_KAFKA_PORT:-29092}
KAFKA_CONTROLLER_PORT=$((KAFKA_PORT + 1))
ETCD_PORT=${GPUPLACE_STACK_ETCD_PORT:-22379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
# Per cluster i (0-based, in GPUPLACE_STACK_CLUSTERS order): base + i.
APISERVER_PORT_BASE=${GPUPLACE_STACK_APISERVER_PORT:-26443}
KCM_PORT_BASE=${GPUPLACE_STACK_KCM_PORT:-27443}
SCHEDULER_PORT_BASE=${GPUPLACE_STACK_SCHEDULER_PORT:-27543}
KWOK_PORT_BASE=${GPUPLACE_STACK_KWOK_PORT:-28080}

PIDS_DIR=$STACK_DIR/pids
LOGS_DIR=$STACK_DIR/logs
PKI_DIR=$STACK_DIR/pki
MARKER=$STACK_DIR/.gpuplace-stack

START_MS=$(date +%s%3N)

# say MESSAGE: progress line with the seconds since the command started.
say() {
  local ms=$(($(date +%s%3N) - START_MS))
  printf '[%4d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"
}
die() { printf 'stack.sh: error: %s\n' "$*" >&2; exit 1; }

validate_clusters() {
  ((${#CLUSTER_LIST[@]})) || die "GPUPLACE_STACK_CLUSTERS is empty"
  local c
  for c in "${CLUSTER_LIST[@]}"; do
    [[ $c =~ ^[a-z][a-z0-9]*$ ]] || die "cluster name '$c' must match [a-z][a-z0-9]* (it becomes an env var suffix)"
  done
}

cluster_index() {
  local i
  for i in "${!CLUSTER_LIST[@]}"; do [[ ${CLUSTER_LIST[$i]} == "$1" ]] && { echo "$i"; return; }; done
  die "unknown cluster '$1'"
}
apiserver_port() { echo $((APISERVER_PORT_BASE + $(cluster_index "$1"))); }
kcm_port() { echo $((KCM_PORT_BASE + $(cluster_index "$1"))); }
scheduler_port() { echo $((SCHEDULER_PORT_BASE + $(cluster_index "$1"))); }
kwok_port() { echo $((KWOK_PORT_BASE + $(cluster_index "$1"))); }
kubeconfig_of() { echo "$STACK_DIR/kube/$1/kubeconfig"; }

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pid_of NAME: the recorded PID (= process group) of a component, if that group still has a process.
pid_of() {
  local file=$PIDS_DIR/$1.pid pid
  [[ -f $file ]] || return 1
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 -- "-$pid" 2>/dev/null && echo "$pid"
}

# already_running NAME CHECK...: 0 when NAME runs and passes CHECK, after waiting (up to 120 s) if it is still
# starting; 1 when it does not run, or exits meanwhile (e.g. it was shutting down), so the caller starts it.
already_running() {
  local name=$1 deadline
  shift
  pid_of "$name" >/dev/null || return 1
  deadline=$(($(date +%s) + 120))
  while pid_of "$name" >/dev/null; do
    "$@" >/dev/null 2>&1 && return 0
    (($(date +%s) <= deadline)) ||
      die "$name runs but has not been healthy for 120 s (log: $LOGS_DIR/$name.log); try stack.sh down, then up"
    sleep 0.5
  done
  say "$name: exited while unhealthy; starting it again"
  return 1
}

# start_bg NAME COMMAND...: run COMMAND in a new session, output appended to logs/NAME.log.
# Not being a process-group leader (no job control in scripts), setsid execs in place, so $! is the PID.
start_bg() {
  local name=$1
  shift
  echo "=== $(date -Is) start: $*" >>"$LOGS_DIR/$name.log"
  setsid "$@" >>"$LOGS_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS_DIR/$name.pid"
}

# Signal that stops a component cleanly, when not SIGTERM. PostgreSQL: SIGINT is its "fast" shutdown (SIGTERM,
# "smart", waits for clients to leave); its backends, which get SIGINT too, only cancel their query.
declare -A STOP_SIGNAL=([postgres]=INT)

# stop_groups NAME...: signal each component's process group at once, wait up to 20 s for all of them,
# SIGKILL the groups still there, forget their PIDs.
stop_groups() {
  local name pid i live=()
  for name in "$@"; do
    if pid=$(pid_of "$name"); then
      kill -s "${STOP_SIGNAL[$name]:-TERM}" -- "-$pid" 2>/dev/null || true
      live+=("$name=$pid")
    else
      rm -f "$PIDS_DIR/$name.pid"
    fi
  done
  for ((i = 0; i < 200 && ${#live[@]}; i++)); do
    sleep 0.1
    local still=() entry
    for entry in "${live[@]}"; do
      if kill -0 -- "-${entry#*=}" 2>/dev/null; then still+=("$entry"); else say "${entry%%=*}: stopped"; fi
    done
    live=("${still[@]}")
  done
  for entry in "${live[@]}"; do
    say "${entry%%=*}: still running after 20 s, SIGKILL to process group ${entry#*=}"
    kill -s KILL -- "-${entry#*=}" 2>/dev/null || true
  done
  for name in "$@"; do rm -f "$PIDS_DIR/$name.pid"; done
}

# wait_until SECONDS NAME COMMAND...: poll COMMAND every 0.5 s; fail with the log tail if it never succeeds
# or if the component's process dies first.
wait_until() {
  local timeout=$1 name=$2 deadline
  shift 2
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! pid_of "$name" >/dev/null; then
      tail -n 40 "$LOGS_DIR/$name.log" >&2 || true
      die "$name exited during start-up (log: $LOGS_DIR/$name.log)"
    fi
    if (($(date +%s) > deadline)); then
      tail -n 40 "$LOGS_DIR/$name.log" >&2 || true
      die "$name not healthy after ${timeout}s (log: $LOGS_DIR/$name.log)"
    fi
    sleep 0.5
  done
}

# claim_port NAME PORT: refuse to start over a port that a process we did not start already holds.
claim_port() {
  port_open "$2" && die "$1: 127.0.0.1:$2 is already in use by a process this stack did not start" \
    "(another GPUPLACE_STACK_DIR? set GPUPLACE_STACK_*_PORT to move)"
  return 0
}
