-- The read-only role of eosflow's Airflow view and metrics, on a warehouse the stack did not make.
-- Run as an administrator of the warehouse database (psql -d <warehouse> -f docs/readonly-role.sql),
-- after eosflow's migrations (any `eosflow ingest` or `eosflow stack up` applies them), with the
-- password of your choice; then give eosflow the same name and password:
-- EOSFLOW_PG_READER_USER / EOSFLOW_PG_READER_PASSWORD (README, "Configuration").
create role eosflow_reader login nosuperuser nocreatedb nocreaterole password 'change me';
select format('grant connect on database %I to eosflow_reader', current_database()) \gexec
grant usage on schema eosflow to eosflow_reader;
grant select on all tables in schema eosflow to eosflow_reader;
-- To name the open transactions that hold a publisher back (other roles' sessions in pg_stat_activity).
grant pg_read_all_stats to eosflow_reader;
-- Each publisher grants it SELECT on its outbox table when it runs (if its role may); else, per outbox:
-- grant select on <schema>.<table> to eosflow_reader;
-- Tables eosflow creates later in its schema: run as eosflow's own role (the tables' owner).
alter default privileges for role eosflow in schema eosflow grant select on tables to eosflow_reader;
