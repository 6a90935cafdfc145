# shellcheck shell=bash
# Apache Kafka of the local stack (sourced by stack.sh): one KRaft node (broker + controller), authenticated on
# every listener, as production is (issue 40: a plaintext port let anyone who reached it write any topic).
#
#   SASL_SSL   127.0.0.1:$KAFKA_PORT              the clients' listener: TLS with a certificate the stack's CA
#                                                 signed (PEM, pki.sh), SASL/PLAIN users (below)
#   CONTROLLER 127.0.0.1:$KAFKA_CONTROLLER_PORT   KRaft's own; SASL/PLAIN, user `broker` only
#   INTERNAL   127.0.0.1:$KAFKA_INTERNAL_PORT     inter-broker; SASL/PLAIN, user `broker` only
#
# Users and passwords: one file each in $KAFKA_DIR/users (mode 600), generated once; `admin` and `broker` are
# super users, every service has a user of its own that deploy/local/kafka/acls.txt grants its topics to
# (StandardAuthorizer refuses the rest). PLAIN, not SCRAM, because a KRaft controller cannot check SCRAM
# credentials and the users then live in one file the broker reads at start: rotating one is deleting its file
# and `stack.sh restart kafka` (README, "Security"). The env file names the admin user for tests and tools, and
# every service's password (GPUPLACE_STACK_KAFKA_PASSWORD_<USER>) for the harnesses that start services.
#
# Settings for tests: topics auto-created (3 partitions), replication factors 1, no initial rebalance delay,
# a small offsets topic (fast first group join), a small heap.

KAFKA_DIR=$STACK_DIR/kafka
KAFKA_INTERNAL_PORT=$((KAFKA_PORT + 2))
KAFKA_ADMIN_USER=admin
KAFKA_SERVICE_USERS=(cluster-watcher placement telemetry-ingest latency-ingest gpu-agent subscriber)
KAFKA_ACLS=$LOCAL_DIR/kafka/acls.txt

_java() {
  local java=${JAVA_HOME:+$JAVA_HOME/bin/}java major
  command -v "$java" >/dev/null || die "kafka: java not found (Java 17+ needed; set JAVA_HOME)"
  major=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
  ((${major:-0} >= 17)) || die "kafka: Java 17+ needed, $java is version ${major:-unknown}"
  echo "$java"
}

# kafka_password USER: a SASL user's password, generated on first use (a new one after its file is deleted).
kafka_password() {
  local file=$KAFKA_DIR/users/$1
  if [[ ! -s $file ]]; then
    mkdir -p "$KAFKA_DIR/users"
    chmod 700 "$KAFKA_DIR/users"
    (umask 077 && head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$file")
  fi
  cat "$file"
}

# _kafka_tls: the broker's PEM key store (key, then certificate) for the SASL_SSL listener.
_kafka_tls() {
  [[ -s $KAFKA_DIR/broker.pem ]] && return
  [[ -s $PKI_DIR/kafka.crt ]] || _sign kafka "/CN=kafka" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment"
  (umask 077 && cat "$PKI_DIR/kafka.key" "$PKI_DIR/kafka.crt" >"$KAFKA_DIR/broker.pem")
}

# _kafka_jaas USER...: a PLAIN login module that accepts USERs; the broker logs in to its own listeners as
# `broker` where `broker` is among them.
_kafka_jaas() {
  local user line="org.apache.kafka.common.security.plain.PlainLoginModule required"
  [[ " $* " == *" broker "* ]] && line+=" username=\"broker\" password=\"$(kafka_password broker)\""
  for user in "$@"; do line+=" user_$user=\"$(kafka_password "$user")\""; done
  echo "$line;"
}

# _kafka_write_config [FILE]: the broker's configuration (default $KAFKA_DIR/server.properties; it holds the
# passwords, so mode 600) and its log4j2 settings.
_kafka_write_config() {
  local file=${1:-$KAFKA_DIR/server.properties}
  mkdir -p "$KAFKA_DIR/data"
  _kafka_tls
  touch "$file" && chmod 600 "$file"
  (cat >"$file" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=SASL_SSL://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,INTERNAL://127.0.0.1:$KAFKA_INTERNAL_PORT
advertised.listeners=SASL_SSL://127.0.0.1:$KAFKA_PORT,INTERNAL://127.0.0.1:$KAFKA_INTERNAL_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.controller.protocol=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_ssl.plain.sasl.jaas.config=$(_kafka_jaas "$KAFKA_ADMIN_USER" "${KAFKA_SERVICE_USERS[@]}")
listener.name.controller.plain.sasl.jaas.config=$(_kafka_jaas broker)
listener.name.internal.plain.sasl.jaas.config=$(_kafka_jaas broker)
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$KAFKA_DIR/broker.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:broker;User:$KAFKA_ADMIN_USER
log.dirs=$KAFKA_DIR/data
auto.create.topics.enable=true
num.partitions=3
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
# Restarts stay quick on a broker that lives for weeks of test runs: committed offsets roll into segments the
# log cleaner compacts (the default 100 MiB segment never rolls here, so a restart re-reads every commit), and
# the controller snapshots its metadata often (a restart replays only what came after the last snapshot).
offsets.topic.segment.bytes=16777216
metadata.log.max.snapshot.interval.ms=300000
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
  )
  cat >"$KAFKA_DIR/log4j2.properties" <<'PROPS'
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
PROPS
}

# _kafka_current: the running broker was started with the configuration this script writes today; a broker
# of an older stack.sh (one with a plaintext listener) or with a password file since deleted is not.
_kafka_current() {
  _kafka_write_config "$KAFKA_DIR/server.properties.new"
  local same=1
  cmp -s "$KAFKA_DIR/server.properties.new" "$KAFKA_DIR/server.properties" && same=0
  rm -f "$KAFKA_DIR/server.properties.new"
  return $same
}

start_kafka() {
  local java
  java=$(_java) || exit 1
  if already_running kafka _kafka_started; then
    _kafka_current && return
    say "kafka: its configuration changed (listeners, users or passwords): restarting it"
    stop_groups kafka
  fi
  claim_port kafka "$KAFKA_PORT"
  claim_port kafka "$KAFKA_CONTROLLER_PORT"
  claim_port kafka "$KAFKA_INTERNAL_PORT"
  _kafka_write_config
  # C1 only (TieredStopAtLevel=1): a broker that lives for one test session never warms up, and on two cores its
  # C2 compiler threads were most of its CPU during a pipeline burst (JFR: 6.5 s of compilation in 41 s).
  local jvm=(-Xms256m -Xmx512m -XX:+UseG1GC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$KAFKA_DIR/log4j2.properties" -cp "$KAFKA_LIB/*")
  if [[ ! -f $KAFKA_DIR/data/meta.properties ]]; then
    # A cluster id is 16 random bytes in URL-safe base64 without padding.
    head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=' >"$KAFKA_DIR/cluster.id"
    "$java" "${jvm[@]}" kafka.tools.StorageTool format --ignore-formatted -t "$(<"$KAFKA_DIR/cluster.id")" \
      -c "$KAFKA_DIR/server.properties" >>"$LOGS_DIR/kafka.log" 2>&1 ||
      die "kafka: formatting the KRaft storage failed (log: $LOGS_DIR/kafka.log)"
  fi
  say "kafka $KAFKA_VERSION: starting on 127.0.0.1:$KAFKA_PORT (KRaft controller on :$KAFKA_CONTROLLER_PORT)"
  start_bg kafka "$java" "${jvm[@]}" kafka.Kafka "$KAFKA_DIR/server.properties"
}

# _kafka_started: since its last start (the log's last "=== " line) the broker logged "Kafka Server started"
# and its group coordinator finished loading every __consumer_offsets partition on disk, and it accepts
# connections. Until the offsets are loaded no consumer group can join or commit: Kafka is not back yet,
# however long that takes (seconds on a broker with millions of commits behind it).
# Partitions are counted, not load lines: a restarted broker's partition epochs can move while it loads
# (load at epoch 60, unload at 61, load at 62), and the later load logs "Scheduling" with no "Finished" of
# its own once the first load is done; counting lines then waited forever (stack.sh up failed after 120 s).
_kafka_started() {
  local offsets
  offsets=$(compgen -G "$KAFKA_DIR/data/__consumer_offsets-*" | wc -l)
  port_open "$KAFKA_PORT" || return 1
  # read backwards to the last start only (the log grows for weeks); tac's SIGPIPE there is expected
  tac "$LOGS_DIR/kafka.log" | awk -v need="$offsets" '
    /^=== / { exit }
    /Kafka Server started/ { ok = 1 }
    /Finished loading of metadata from __consumer_offsets-/ {
      match($0, /__consumer_offsets-[0-9]+/); partition = substr($0, RSTART, RLENGTH)
      if (!(partition in loaded)) { loaded[partition] = 1; count++ }
    }
    END { exit !(ok && count >= need) }'
  return "${PIPESTATUS[1]}"
}

wait_kafka() {
  wait_until 120 kafka _kafka_started
  _kafka_grant
  say "kafka: up (SASL_SSL on 127.0.0.1:$KAFKA_PORT)"
}

# _kafka_grant: the ACLs of deploy/local/kafka/acls.txt, added once per version of the table (AclCommand
# adds what is missing; a line removed from the table stays granted until `stack.sh down`). One JVM per line,
# logged in as `broker` on the internal listener.
_kafka_grant() {
  local java sum applied=$KAFKA_DIR/acls.applied principal permission operations resource pattern names
  sum=$(sha256sum <"$KAFKA_ACLS" | cut -d' ' -f1)
  [[ -f $applied && $(<"$applied") == "$sum" ]] && return
  java=$(_java) || exit 1
  (umask 077 && cat >"$KAFKA_DIR/admin.properties" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="$(kafka_password broker)";
PROPS
  )
  say "kafka: granting each service its topics ($(realpath --relative-to="$REPO_DIR" "$KAFKA_ACLS"))"
  while read -r principal permission operations resource pattern names; do
    [[ -z $principal || $principal == \#* ]] && continue
    local args=(--bootstrap-server "127.0.0.1:$KAFKA_INTERNAL_PORT" --command-config "$KAFKA_DIR/admin.properties"
      --add "--$permission-principal" "User:$principal" --resource-pattern-type "$pattern") name operation
    local -a list
    IFS=, read -r -a list <<<"$operations"
    for operation in "${list[@]}"; do args+=(--operation "$operation"); done
    read -r -a list <<<"$names" # not `for name in $names`: a name `*` (every group) would be globbed
    for name in "${list[@]}"; do args+=("--$resource" "$name"); done
    "$java" -Xshare:auto -XX:TieredStopAtLevel=1 -Xmx128m -cp "$KAFKA_LIB/*" \
      "-Dlog4j2.configurationFile=$KAFKA_DIR/log4j2.properties" org.apache.kafka.tools.AclCommand "${args[@]}" \
      >>"$LOGS_DIR/kafka-acls.log" 2>&1 ||
      die "kafka: granting $principal $operations on $resource $names failed (log: $LOGS_DIR/kafka-acls.log)"
  done <"$KAFKA_ACLS"
  echo "$sum" >"$applied"
}

kafka_healthy() { pid_of kafka >/dev/null && _kafka_started; }
