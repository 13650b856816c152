with

source as (

    select * from {{ source('eosflow', 'positions') }}

),

renamed as (

    select
        pipeline,
        topic,
        partition,
        next_offset,
        updated_at

    from source
    where pipeline = '{{ var("pipeline") }}'

)

select * from renamed
