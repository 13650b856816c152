with

source as (

    select * from {{ source('raw', 'output') }}

),

renamed as (

    -- Every pipeline's target has the Kafka columns, its declared columns, batch_id and
    -- transform_version (docs/DESIGN.md, "Declared columns"): all of them, with the pipeline's name.
    select
        '{{ var("pipeline") }}'::text as pipeline,
        source.*

    from source

)

select * from renamed
