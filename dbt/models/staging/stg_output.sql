with

source as (

    select * from {{ source('raw', 'output') }}

),

renamed as (

    select
        '{{ var("pipeline") }}'::text as pipeline,
        kafka_topic,
        kafka_partition,
        kafka_offset,
        kafka_timestamp,
        kafka_key,
        event_id,
        event_type,
        event_time,
        order_id,
        customer_id,
        amount_cents,
        currency,
        schema_version,
        batch_id,
        transform_version

    from source

)

select * from renamed
