# shellcheck shell=bash
# Apache Kafka of the local stack (sourced by stack.sh): one KRaft node (broker + controller) on
# 127.0.0.1:$KAFKA_PORT, run by the machine's Java 17+ from the jars build.sh resolved.
#
# A second listener, SASL_SSL on 127.0.0.1:$KAFKA_SASL_PORT, is what production looks like: TLS with a
# certificate the stack's CA signed (PEM, pki.sh) and SASL/PLAIN user `gpuplace` with a password generated once
# into $KAFKA_DIR/sasl-password (mode 600). The env file names both, for the tests of gpuplace's Kafka security.
#
# Settings for tests: topics auto-created (3 partitions), replication factors 1, no initial rebalance delay,
# a small offsets topic (fast first group join), a small heap.

KAFKA_DIR=$STACK_DIR/kafka
KAFKA_SASL_PORT=$((KAFKA_PORT + 2))
KAFKA_SASL_USER=gpuplace

_java() {
  local java=${JAVA_HOME:+$JAVA_HOME/bin/}java major
  command -v "$java" >/dev/null || die "kafka: java not found (Java 17+ needed; set JAVA_HOME)"
  major=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
  ((${major:-0} >= 17)) || die "kafka: Java 17+ needed, $java is version ${major:-unknown}"
  echo "$java"
}

# kafka_sasl_password: the SASL user's password, generated on first use.
kafka_sasl_password() {
  if [[ ! -s $KAFKA_DIR/sasl-password ]]; then
    mkdir -p "$KAFKA_DIR"
    (umask 077 && head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$KAFKA_DIR/sasl-password")
  fi
  cat "$KAFKA_DIR/sasl-password"
}

# _kafka_tls: the broker's PEM key store (key, then certificate) for the SASL_SSL listener.
_kafka_tls() {
  [[ -s $KAFKA_DIR/broker.pem ]] && return
  [[ -s $PKI_DIR/kafka.crt ]] || _sign kafka "/CN=kafka" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment"
  (umask 077 && cat "$PKI_DIR/kafka.key" "$PKI_DIR/kafka.crt" >"$KAFKA_DIR/broker.pem")
}

_kafka_write_config() {
  mkdir -p "$KAFKA_DIR/data"
  _kafka_tls
  local password
  password=$(kafka_sasl_password)
  touch "$KAFKA_DIR/server.properties" && chmod 600 "$KAFKA_DIR/server.properties"
  (cat >"$KAFKA_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
  username="$KAFKA_SASL_USER" password="$password" user_$KAFKA_SASL_USER="$password";
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$KAFKA_DIR/broker.pem
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

start_kafka() {
  local java
  java=$(_java) || exit 1
  already_running kafka _kafka_started && return
  claim_port kafka "$KAFKA_PORT"
  claim_port kafka "$KAFKA_CONTROLLER_PORT"
  claim_port kafka "$KAFKA_SASL_PORT"
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
  say "kafka: up (127.0.0.1:$KAFKA_PORT)"
}

kafka_healthy() { pid_of kafka >/dev/null && _kafka_started; }
