-- Exactly-once targets are partitioned by offset range (eosflow.sinks.postgres.partitions): each Spark
-- task stages its planned range into a logged child and records here what it wrote, in the same
-- transaction as the child, so the commit checks the counts without scanning a row.
create table staging.ranges (
    batch_id         text not null,
    topic            text not null,
    partition        int not null,
    child            text not null,  -- schema.table of the staged child
    rows_written     bigint not null,
    rows_rejected    bigint not null,
    primary key (batch_id, topic, partition)
);
