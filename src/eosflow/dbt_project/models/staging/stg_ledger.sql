with

source as (

    select * from {{ source('eosflow', 'ledger') }}

),

renamed as (

    select
        id as ledger_id,
        pipeline,
        topic,
        partition,
        start_offset,
        end_offset,
        kind,
        batch_id,
        records_read,
        rows_written,
        rows_rejected,
        committed_at

    from source
    where pipeline = '{{ var("pipeline") }}'

)

select * from renamed
