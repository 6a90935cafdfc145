# shellcheck shell=bash
# PostgreSQL of the local stack (sourced by stack.sh): the Debian package's binaries, a cluster initialised
# in $STACK_DIR/postgres, listening on 127.0.0.1:$PG_PORT, with role and database "gpuplace".
#
# PostgreSQL refuses to run as root, so under root the server runs as the package's `postgres` user
# (setpriv execs in place, so the recorded PID is the postmaster's). Durability is off (fsync, full-page
# writes): the data is thrown away by `down`, and speed is what the tests need.

PG_DIR=$STACK_DIR/postgres
PG_DATA=$PG_DIR/data
PG_SOCKET_DIR=$PG_DIR/run
PG_RUNAS=()

_pg_bin() {
  local bin=${GPUPLACE_STACK_PG_BIN:-}
  if [[ -z $bin ]]; then
    bin=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)
  fi
  [[ -x $bin/initdb && -x $bin/postgres ]] ||
    die "postgres: no PostgreSQL server binaries (looked in ${bin:-/usr/lib/postgresql/*/bin});" \
      "run deploy/local/install-deps.sh or set GPUPLACE_STACK_PG_BIN"
  echo "$bin"
}

_pg_prepare_user() {
  if ((EUID == 0)); then
    id postgres >/dev/null 2>&1 || die "postgres: running as root needs the 'postgres' user (apt-get install postgresql)"
    PG_RUNAS=(setpriv --reuid=postgres --regid=postgres --init-groups)
  fi
}

_pg_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -d postgres; }

# postgres_url: the asyncpg URL the services and tests use.
postgres_url() { echo "postgresql+asyncpg://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB"; }

start_postgres() {
  PG_BIN=$(_pg_bin) || exit 1
  _pg_prepare_user
  already_running postgres _pg_ready && return
  claim_port postgres "$PG_PORT"
  mkdir -p "$PG_DIR" "$PG_SOCKET_DIR"
  ((EUID == 0)) && chown postgres: "$PG_DIR" "$PG_SOCKET_DIR"
  if [[ ! -f $PG_DATA/PG_VERSION ]]; then
    say "postgres: initdb ($("$PG_BIN/postgres" --version))"
    rm -rf "$PG_DATA"
    "${PG_RUNAS[@]}" "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
      -E UTF8 --no-locale --no-instructions >>"$LOGS_DIR/postgres.log" 2>&1 ||
      die "postgres: initdb failed (log: $LOGS_DIR/postgres.log)"
  fi
  say "postgres: starting on 127.0.0.1:$PG_PORT"
  start_bg postgres "${PG_RUNAS[@]}" "$PG_BIN/postgres" -D "$PG_DATA" -p "$PG_PORT" -k "$PG_SOCKET_DIR" \
    -c listen_addresses=127.0.0.1 -c max_connections=300 \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off
}

# wait_postgres: ready, then role and database created if missing (idempotent).
wait_postgres() {
  wait_until 60 postgres _pg_ready
  "$PG_BIN/psql" -h "$PG_SOCKET_DIR" -p "$PG_PORT" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 \
    -v user="$PG_USER" -v password="$PG_PASSWORD" -v db="$PG_DB" >>"$LOGS_DIR/postgres.log" 2>&1 <<'SQL' ||
SELECT format('CREATE ROLE %I LOGIN CREATEDB PASSWORD %L', :'user', :'password')
  WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I PASSWORD %L', :'user', :'password') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \gexec
SQL
    die "postgres: creating role/database $PG_USER/$PG_DB failed (log: $LOGS_DIR/postgres.log)"
  say "postgres: up ($(postgres_url | sed 's/:[^:@]*@/:***@/'))"
}

postgres_healthy() {
  PG_BIN=$(_pg_bin) || return 1
  pid_of postgres >/dev/null && _pg_ready
}
