-- Where each pipeline writes, as its sink names it (a table, "topic <name>", ...), recorded by its first run:
-- a later declaration naming another output is refused before planning (the ledger's ranges describe rows
-- in this one). Pipelines that committed before this table existed record their output on their next run.
create table if not exists eosflow.pipeline_outputs (
    pipeline     text primary key,
    output       text not null,
    recorded_at  timestamptz not null default now()
);
