#!/usr/bin/env bash
# What deploy/local/stack.sh needs from the machine; idempotent, quiet when everything is there.
#
# - Debian packages, installed when missing (one `apt-get update`, only then): PostgreSQL server binaries,
#   openssl (cluster certificates), curl (health checks), util-linux (setsid, setpriv), coreutils, and Chromium
#   with a font (the fleet report's page is rendered headless in a test: tests/unit/cli/test_report_cli.py).
# - Toolchains, checked and never installed: Go (builds etcd, kube-apiserver, kube-controller-manager, KWOK and
#   helm from the module proxy; at least the newest `go` directive of deploy/local/*/go.mod), Java 17+ (Kafka),
#   Maven (resolves the Kafka jars).
set -euo pipefail
cd "$(dirname "$0")"

fail() { printf 'install-deps: %s\n' "$*" >&2; exit 1; }

# --- Debian packages ------------------------------------------------------------------------------------
missing=()
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || missing+=(postgresql)
command -v openssl >/dev/null || missing+=(openssl)
command -v curl >/dev/null || missing+=(curl ca-certificates)
command -v setpriv >/dev/null && command -v setsid >/dev/null || missing+=(util-linux)
command -v sha256sum >/dev/null && command -v base64 >/dev/null || missing+=(coreutils)
command -v chromium >/dev/null || missing+=(chromium fonts-liberation)

if ((${#missing[@]})); then
  command -v apt-get >/dev/null || fail "missing ${missing[*]} and no apt-get: install them by hand"
  sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || fail "missing ${missing[*]}; run as root: apt-get install ${missing[*]}"
    sudo=(sudo)
  fi
  echo "install-deps: installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null
fi

# --- Toolchains -----------------------------------------------------------------------------------------
command -v go >/dev/null || fail "go not found: install Go >= 1.26 (https://go.dev/dl) and put it on PATH"
command -v mvn >/dev/null || fail "mvn not found: apt-get install maven (Maven resolves the Kafka jars)"
java=${JAVA_HOME:+$JAVA_HOME/bin/}java
command -v "$java" >/dev/null || fail "java not found: apt-get install openjdk-17-jre-headless (Kafka needs Java 17+)"

java_major=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
((${java_major:-0} >= 17)) || fail "Kafka 4 needs Java 17+, found $java version ${java_major:-unknown}"

# The newest `go` directive among the wrapper modules is the oldest Go that can build the stack.
needed_go=$(awk '$1 == "go" {print $2}' etcd/go.mod kube/go.mod kwok/go.mod helm/go.mod | sort -V | tail -n 1)
have_go=$(go env GOVERSION | sed 's/^go//')
if [[ $(printf '%s\n%s\n' "$needed_go" "$have_go" | sort -V | head -n 1) != "$needed_go" ]]; then
  fail "Go $have_go is older than $needed_go (deploy/local/*/go.mod): install a newer Go" \
    "(or export GOTOOLCHAIN=go$needed_go to let the go command fetch it through the module proxy)"
fi

pg_bin=$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n 1)
mvn_version=$(mvn -v 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' | sed -n 's/^Apache Maven \([^ ]*\).*/\1/p')
echo "install-deps: ok ($("$pg_bin" --version), go $have_go, java $java_major, maven $mvn_version)"
