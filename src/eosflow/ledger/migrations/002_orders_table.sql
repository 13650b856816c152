-- The output table of the orders transform. Further pipelines using the same transform get a
-- table created `like` this one. The primary key enforces invariant I1 inside the output.
create table raw.orders (
    kafka_topic        text not null,
    kafka_partition    int not null,
    kafka_offset       bigint not null,
    kafka_timestamp    timestamptz,
    kafka_key          text,
    kafka_headers      jsonb not null default '[]',
    event_id           uuid not null,
    event_type         text not null,
    event_time         timestamptz not null,
    order_id           text not null,
    customer_id        text not null,
    amount_cents       bigint not null,
    currency           char(3) not null,
    schema_version     int not null,
    batch_id           text not null,
    transform_version  text not null,
    primary key (kafka_topic, kafka_partition, kafka_offset)
);
