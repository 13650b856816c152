-- The exactly-once bookkeeping (DESIGN.md, "Words"): plans, the ledger of committed ranges, the
-- positions, and the rejected records. Everything the commit touches lives in this one database.
create schema if not exists eosflow;
create schema if not exists raw;
create schema if not exists staging;

-- One row per run: the ranges it reads, persisted before reading so a retry re-reads the same.
create table eosflow.plans (
    batch_id      text primary key,
    pipeline      text not null,
    run_id        text not null,
    status        text not null default 'planned' check (status in ('planned', 'committed')),
    partitions    jsonb not null,
    created_at    timestamptz not null default now(),
    committed_at  timestamptz
);

-- The next offset to read per (pipeline, topic, partition). NULL: planned but never committed.
create table eosflow.positions (
    pipeline     text not null,
    topic        text not null,
    partition    int not null,
    next_offset  bigint check (next_offset >= 0),
    updated_at   timestamptz not null default now(),
    primary key (pipeline, topic, partition)
);

-- Committed ranges: 'data' was read; 'lost' was deleted by Kafka before it could be read and the
-- run acknowledged it; 'replay' re-read an already committed range (positions do not move).
create table eosflow.ledger (
    id              bigserial primary key,
    pipeline        text not null,
    topic           text not null,
    partition       int not null,
    start_offset    bigint not null check (start_offset >= 0),
    end_offset      bigint not null check (end_offset >= start_offset),
    kind            text not null check (kind in ('data', 'lost', 'replay')),
    batch_id        text not null,
    records_read    bigint not null check (records_read >= 0),
    rows_written    bigint not null check (rows_written >= 0),
    rows_rejected   bigint not null check (rows_rejected >= 0),
    committed_at    timestamptz not null default now()
);
-- Two committed ranges of one partition can never start at the same offset (replays excepted).
create unique index ledger_range_start on eosflow.ledger (pipeline, topic, partition, start_offset)
    where kind in ('data', 'lost');
create index ledger_batch on eosflow.ledger (batch_id);

-- Records that could not be decoded or validated: kept with their raw bytes, never dropped.
create table eosflow.rejected (
    pipeline         text not null,
    kafka_topic      text not null,
    kafka_partition  int not null,
    kafka_offset     bigint not null,
    kafka_timestamp  timestamptz,
    raw_key          bytea,
    raw_value        bytea,
    error            text not null,
    batch_id         text not null,
    primary key (pipeline, kafka_topic, kafka_partition, kafka_offset)
);

create unlogged table staging.rejected (like eosflow.rejected);
create index staging_rejected_batch on staging.rejected (batch_id);
