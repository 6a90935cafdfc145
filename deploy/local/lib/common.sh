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

PG_PORT=${GPUPLACE_STACK_PG_PORT:-55432}
PG_USER=gpuplace
PG_DB=gpuplace
PG_PASSWORD=${GPUPLACE_STACK_PG_PASSWORD:-gpuplace}
KAFKA_PORT=${GPUPLACE_STACK_KAFKA_PORT:-59092}
KAFKA_CONTROLLER_PORT=$((KAFKA_PORT + 1))
ETCD_PORT=${GPUPLACE_STACK_ETCD_PORT:-52379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
# Per cluster i (0-based, in GPUPLACE_STACK_CLUSTERS order): base + i.
APISERVER_PORT_BASE=${GPUPLACE_STACK_APISERVER_PORT:-56443}
KCM_PORT_BASE=${GPUPLACE_STACK_KCM_PORT:-57443}
KWOK_PORT_BASE=${GPUPLACE_STACK_KWOK_PORT:-58080}

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

# start_bg NAME COMMAND...: run COMMAND in a new session, output appended to logs/NAME.log.
# Not being a process-group leader (no job control in scripts), setsid execs in place, so $! is the PID.
start_bg() {
  local name=$1
  shift
  echo "=== $(date -Is) start: $*" >>"$LOGS_DIR/$name.log"
  setsid "$@" >>"$LOGS_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS_DIR/$name.pid"
}

# stop_group NAME [SIGNAL]: signal the component's process group, wait up to 20 s, then SIGKILL it.
stop_group() {
  local name=$1 signal=${2:-TERM} pid i
  pid=$(pid_of "$name") || { rm -f "$PIDS_DIR/$name.pid"; return 0; }
  kill -s "$signal" -- "-$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    kill -0 -- "-$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 -- "-$pid" 2>/dev/null; then
    say "$name: still running after 20 s, SIGKILL to group $pid"
    kill -s KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$PIDS_DIR/$name.pid"
  say "$name: stopped"
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
