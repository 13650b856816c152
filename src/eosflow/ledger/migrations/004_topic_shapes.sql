-- Issue 13: shapes of real topics (docs/DESIGN.md, "Rules for real topics").

-- An empty first range [s, s) fixes where an idle partition's history starts; the partition's next
-- range starts at s too. Only ranges that hold offsets can collide.
drop index eosflow.ledger_range_start;
create unique index ledger_range_start on eosflow.ledger (pipeline, topic, partition, start_offset)
    where kind in ('data', 'lost') and end_offset > start_offset;

-- Kafka's id of the topic the position counts in: a topic deleted and re-created with the same name
-- gets a new id, and its offsets mean other records. NULL until the first commit that knows it.
alter table eosflow.positions add column topic_id text;

-- Committed replays of the partition: a replay plan records it, and its commit is fenced when
-- another replay committed in between (replays never move next_offset, so that cannot tell).
alter table eosflow.positions add column replays bigint not null default 0 check (replays >= 0);
