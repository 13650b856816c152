with

events as (

    select * from {{ ref('order_events') }}

),

bucketed as (

    select
        event_type,
        date_trunc('hour', event_time at time zone 'UTC') as event_hour_utc,
        amount_cents

    from events

),

counted as (

    select
        event_type,
        event_hour_utc,
        count(*) as events,
        sum(amount_cents) as amount_cents

    from bucketed
    group by event_type, event_hour_utc

)

select * from counted
