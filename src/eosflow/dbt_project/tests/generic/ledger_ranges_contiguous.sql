{#-
    I2: per (topic, partition) the ledger's data and lost ranges, ordered by start, are contiguous
    and never overlap: each range starts exactly where the ranges before it end.

    Checked on the ledger only, never on record offsets: transactional topics leave holes (commit
    markers, aborted records) inside perfectly good ranges.

    "Where the ranges before it end" is the max end of all earlier ranges, not just the previous
    one, so a range nested inside another is one overlap, not an overlap plus a phantom gap.
    One row per break: the partition, the range, and the offsets no range covers (`gap`) or that
    two ranges cover (`overlap`).
-#}
{% test ledger_ranges_contiguous(model) %}

with

committed_ranges as (

    select topic, partition, start_offset, end_offset, kind, batch_id
    from {{ model }}
    where kind in ('data', 'lost')

),

with_previous_end as (

    select
        *,
        max(end_offset) over (
            partition by topic, partition
            order by start_offset, end_offset
            rows between unbounded preceding and 1 preceding
        ) as previous_end

    from committed_ranges

),

breaks as (

    select
        topic,
        partition,
        case when start_offset > previous_end then 'gap' else 'overlap' end as problem,
        case
            when start_offset > previous_end
                then '[' || previous_end || ', ' || start_offset || ')'
            else '[' || start_offset || ', ' || least(previous_end, end_offset) || ')'
        end as offsets,
        start_offset,
        end_offset,
        previous_end,
        kind,
        batch_id

    from with_previous_end
    where start_offset <> previous_end  -- null for a partition's first range: nothing before it

)

select * from breaks
order by topic, partition, start_offset

{% endtest %}
