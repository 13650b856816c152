-- The latest verdict of every check `eosflow verify` ran (dbt's tests, I1-I6 among them, or a Kafka
-- sink's read-back), kept in the warehouse so the Airflow view and the metrics read them from where
-- the data is, not from files on whichever worker ran dbt. One row per check of each verification;
-- the view shows the pipeline's latest (max checked_at). Offending rows: the first few, as JSON.
create table eosflow.checks (
    pipeline    text not null,
    checked_at  timestamptz not null,
    name        text not null,
    invariant   text,
    status      text not null,
    failures    bigint not null default 0,
    rows        jsonb not null default '[]',
    message     text,
    primary key (pipeline, checked_at, name)
);

-- The read-only role the Airflow view and the metrics read through (never the pipeline's owner role):
-- the stack creates eosflow_reader; on an existing warehouse an administrator runs
-- docs/readonly-role.sql. The owner grants it what it may read, if it exists.
do $$
begin
    if exists (select 1 from pg_roles where rolname = 'eosflow_reader') then
        grant usage on schema eosflow to eosflow_reader;
        grant select on all tables in schema eosflow to eosflow_reader;
        alter default privileges in schema eosflow grant select on tables to eosflow_reader;
    end if;
end
$$;
