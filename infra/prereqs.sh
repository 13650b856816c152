#!/usr/bin/env bash
# What the local stack needs from the machine, from Debian's packages: installed when missing if run as
# root (saying what), else a one-line error naming the command to run. `make setup` (so `make demo` and
# `make test`) runs it first; nothing is installed when everything is there.
#   Java 17+  openjdk-17-jdk-headless  Kafka, Spark, the schema registry
#   Maven     maven                    fetches the jars from Maven Central
#   PG 15     postgresql-15            initdb/pg_ctl for the private warehouse cluster (EOSFLOW_PG_BIN)
#   Go        golang-go                builds toxiproxy for the delivery lab (EOSFLOW_GO)
set -euo pipefail

missing=()

java_ok() {
  command -v java >/dev/null || return 1
  local major
  major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
  [ -n "$major" ] && [ "$major" -ge 17 ]
}
java_ok || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
pg_bin=${EOSFLOW_PG_BIN:-/usr/lib/postgresql/15/bin}
[ -x "$pg_bin/initdb" ] && [ -x "$pg_bin/pg_ctl" ] && [ -x "$pg_bin/postgres" ] || missing+=(postgresql-15)
[ -n "${EOSFLOW_GO:-}" ] || command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || missing+=(golang-go)

[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "eosflow needs ${missing[*]} from the machine's packages: run as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "eosflow needs ${missing[*]} (Debian's package names) and this machine has no apt-get: install them" >&2
  exit 1
fi
echo "eosflow: installing what the stack needs from Debian's packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "eosflow: installed ${missing[*]}"
