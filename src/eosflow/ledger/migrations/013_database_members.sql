-- The members of each `database:` entry (docs/DESIGN.md, "A whole database in one declaration"): one row per
-- table discovery found, with the shape it read from Debezium's schema block (columns, primary key, fields
-- left out). Kept here, not in a file, so every process (a DAG's tasks on any worker, the CLI, the view)
-- sees the same members without asking Kafka. The entry's settings stay in pipelines.yml: a member's
-- pipeline is the entry's shared settings and this row, put together when it is loaded.
create table eosflow.members (
    entry          text not null,
    member         text not null,
    topic          text not null,
    source_schema  text not null,
    source_table   text not null,
    shape          jsonb not null,
    discovered_at  timestamptz not null default now(),
    changed_at     timestamptz not null default now(),
    primary key (entry, member),
    unique (entry, topic)
);

-- The view shows members as it shows pipelines: it reads what a member's pipeline is made of (its topic and
-- the shape: column names and types, nothing from the data).
do $$
begin
    if exists (select from pg_roles where rolname = 'eosflow_reader') then
        grant select on eosflow.members to eosflow_reader;
    end if;
end
$$;
