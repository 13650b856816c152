-- The read-only role of eosflow's Airflow view and metrics, on a warehouse the stack did not make.
-- Run as an administrator of the warehouse database (psql -d <warehouse> -f docs/readonly-role.sql),
-- after eosflow's migrations (any `eosflow ingest`, `eosflow publish` or `eosflow stack up` applies them),
-- with the password of your choice; then give eosflow the same name and password:
-- EOSFLOW_PG_READER_USER / EOSFLOW_PG_READER_PASSWORD (README, "Configuration").
-- It reads what the view shows and no more (docs/DESIGN.md, "Trust boundaries", The reader role); a role
-- named eosflow_reader that exists when the migrations run gets the same grants from them.
create role eosflow_reader login nosuperuser nocreatedb nocreaterole password 'change me';
select format('grant connect on database %I to eosflow_reader', current_database()) \gexec
grant usage on schema eosflow to eosflow_reader;
-- The tables the view reads; of the rejected records, their coordinates and reason, never their raw key
-- and value. No default privilege: a table eosflow adds later is granted by the migration that adds it.
grant select on eosflow.positions, eosflow.ledger, eosflow.plans, eosflow.checks, eosflow.publish_positions
    to eosflow_reader;
grant select (pipeline, kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, error, batch_id)
    on eosflow.rejected to eosflow_reader;
-- No outbox and no other session's query text: a publisher's waiting rows are counted, and the open
-- transactions that hold them named, by two functions eosflow's role owns and runs (SECURITY DEFINER).
-- A database entry's members: the view shows them as pipelines (their topics, column names and types).
grant select on eosflow.members to eosflow_reader;
grant execute on function eosflow.outbox_waiting(text, xid8), eosflow.open_transactions(double precision)
    to eosflow_reader;
-- For eosflow.open_transactions to name other roles' sessions (state and age; pg_stat_activity shows them
-- only to members of pg_read_all_stats), eosflow's own role, which owns it, must be one. Not the reader:
-- it would see every session's query text. Replace eosflow with EOSFLOW_PG_USER if yours differs.
grant pg_read_all_stats to eosflow;
-- A reader made by an earlier version of this file had more: eosflow's migration 012 takes back its SELECT
-- on every eosflow table and outbox (and the default privilege); run this to take back the statistics:
--   revoke pg_read_all_stats from eosflow_reader;
