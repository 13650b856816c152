-- The at-least-once publisher's positions (delivery: at_least_once, the lab's comparison): stored in
-- Postgres after its records were produced, so a crash in between publishes them again. The
-- exactly-once publisher keeps its position in Kafka, in the same transaction as its records.
create table eosflow.publish_positions (
    publisher   text not null,
    shard       int not null,
    xid         bigint not null,
    id          text not null,
    updated_at  timestamptz not null default now(),
    primary key (publisher, shard)
);
