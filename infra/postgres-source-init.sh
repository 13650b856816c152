#!/bin/sh
# Docker only: the source database `eosflow stack up --with connect` provisions natively, owned by a
# LOGIN REPLICATION role for Debezium. Made only when EOSFLOW_SOURCE_PASSWORD is set (psql reads it from
# the environment itself, \getenv, so it is on no command line).
set -eu
if [ -z "${EOSFLOW_SOURCE_PASSWORD:-}" ]; then
  echo "EOSFLOW_SOURCE_PASSWORD is not set: no source database for Debezium"
  exit 0
fi
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres <<'SQL'
\getenv pw EOSFLOW_SOURCE_PASSWORD
create role eosflow_source login replication nosuperuser password :'pw';
create database source owner eosflow_source;
SQL
