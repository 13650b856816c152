with

output as (

    select * from {{ ref('stg_output') }}

),

ranked as (

    select
        *,
        row_number() over (
            partition by event_id
            order by kafka_partition, kafka_offset
        ) as occurrence,
        count(*) over (partition by event_id) as occurrences

    from output

),

first_occurrences as (

    select
        event_id,
        event_type,
        event_time,
        order_id,
        customer_id,
        amount_cents,
        currency,
        schema_version,
        kafka_topic,
        kafka_partition,
        kafka_offset,
        kafka_timestamp,
        occurrences,
        batch_id,
        transform_version

    from ranked
    where occurrence = 1

)

select * from first_occurrences
