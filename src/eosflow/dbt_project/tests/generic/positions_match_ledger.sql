{#-
    I5: each stored position equals the end of its partition's last committed range (the max
    end_offset of its data and lost ranges; replays never move positions).

    A null position (planned, never committed) is right only while the partition has no ledger
    range; ledger ranges without any position row are a violation too.
    One row per offending partition: the stored position, the ledger's end, and what is wrong.
-#}
{% test positions_match_ledger(model, ledger) %}

with

positions as (

    select topic, partition, next_offset
    from {{ model }}

),

ledger_ends as (

    select topic, partition, max(end_offset) as ledger_end
    from {{ ledger }}
    where kind in ('data', 'lost')
    group by topic, partition

),

compared as (

    select
        coalesce(positions.topic, ledger_ends.topic) as topic,
        coalesce(positions.partition, ledger_ends.partition) as partition,
        positions.next_offset as stored_position,
        ledger_ends.ledger_end,
        case
            when positions.topic is null then 'ledger ranges but no position row'
            when ledger_ends.topic is null then 'a position but no ledger range'
            when positions.next_offset is null then 'null position but ledger ranges'
            when positions.next_offset < ledger_ends.ledger_end then 'position behind the ledger'
            else 'position ahead of the ledger'
        end as problem

    from positions
    full outer join ledger_ends
        on positions.topic = ledger_ends.topic
       and positions.partition = ledger_ends.partition

)

select * from compared
where stored_position is distinct from ledger_end
order by topic, partition

{% endtest %}
