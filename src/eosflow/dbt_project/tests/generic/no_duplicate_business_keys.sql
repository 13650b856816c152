{#-
    I6: no business key (the pipeline's declared business_key column) appears twice in the output.
    With I1 holding, a duplicate sits at two different offsets: the producer wrote the record
    twice (retries without idempotence). The fix is the idempotent producer, not the ingestion.
    One row per duplicated key: how many copies, every topic[partition]@offset holding one,
    and the committed data range (and when it was committed) of each copy, which dates the
    producer's misbehaviour.

    The ledger also makes this a test of two models, which dbt build never lets gate the marts.
    That matters: a committed duplicate stays in the output for good, and order_events (one row
    per event id) is exactly what consumers need meanwhile; a test of stg_output alone would skip
    order_events and event_counts_hourly on every run from then on.
-#}
{% test no_duplicate_business_keys(model, key, ledger) %}

with

occurrences as (

    select {{ adapter.quote(key) }}::text as business_key, kafka_topic, kafka_partition, kafka_offset
    from {{ model }}
    where {{ adapter.quote(key) }} is not null

),

duplicated_ids as (

    select business_key
    from occurrences
    group by business_key
    having count(*) > 1

),

copies as (

    select
        occurrences.*,
        coalesce(
            '[' || committed.start_offset || ', ' || committed.end_offset || ') at '
                || to_char(committed.committed_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC',
            'no data range'
        ) as committed_in

    from occurrences
    inner join duplicated_ids on occurrences.business_key = duplicated_ids.business_key
    left join lateral (
        select start_offset, end_offset, committed_at
        from {{ ledger }}
        where kind = 'data'
          and topic = occurrences.kafka_topic
          and partition = occurrences.kafka_partition
          and start_offset <= occurrences.kafka_offset
          and end_offset > occurrences.kafka_offset
        order by start_offset
        limit 1
    ) as committed on true

),

duplicated as (

    select
        business_key,
        count(*) as copies,
        string_agg(
            kafka_topic || '[' || kafka_partition || ']@' || kafka_offset, ', '
            order by kafka_partition, kafka_offset
        ) as found_at,
        string_agg(committed_in, ', ' order by kafka_partition, kafka_offset) as committed_in

    from copies
    group by business_key

)

select * from duplicated
order by business_key

{% endtest %}
