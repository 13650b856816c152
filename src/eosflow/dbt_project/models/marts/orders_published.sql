{#-
    The order events eosflow publishes back to Kafka (publisher `orders_published` in pipelines.yml):
    the round trip Kafka -> warehouse -> Kafka of docs/DESIGN.md, "Publishing".

    Incremental and append-only, because a publisher publishes what a table *inserts*: each row carries
    the id of the transaction that inserted it (`eosflow_xid`, the publisher's position). A rebuilt
    table (`dbt build --full-refresh`) gives every row a new id, and the publisher sends them all again.
    The publisher refuses an id column that is not NOT NULL and unique: the post-hooks make it both.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='append',
        on_schema_change='fail',
        post_hook=[
            "{{ set_not_null(this, 'event_id') }}",
            "create unique index if not exists {{ this.identifier }}_event_id on {{ this }} (event_id)",
            "create index if not exists {{ this.identifier }}_eosflow_xid on {{ this }} (eosflow_xid, event_id)",
        ],
    )
}}

with

events as (

    select * from {{ ref('order_events') }}

),

new_events as (

    select
        event_id,
        event_type,
        event_time,
        order_id,
        customer_id,
        amount_cents,
        currency,
        schema_version,
        -- the inserting transaction: this model's statement runs in the transaction that inserts
        pg_current_xact_id() as eosflow_xid

    from events

    {% if is_incremental() %}
    where not exists (select 1 from {{ this }} as published where published.event_id = events.event_id)
    {% endif %}

)

select * from new_events
