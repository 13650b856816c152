with

source as (

    select * from {{ source('eosflow', 'rejected') }}

),

renamed as (

    select
        pipeline,
        kafka_topic,
        kafka_partition,
        kafka_offset,
        kafka_timestamp,
        error,
        batch_id

    from source
    where pipeline = '{{ var("pipeline") }}'

)

select * from renamed
