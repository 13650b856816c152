{#-
    I3: every output or rejected row lies inside exactly one committed data range of its pipeline.

    A sweep instead of a join of rows to ranges (rows x ranges grows with every run): ranges open
    (+1) at their start and close (-1) at their end, exclusive; walking a partition's boundaries
    and rows in offset order, the running sum at a row is the number of data ranges covering it.
    Rows are judged per coordinate, so a record stored twice (I1's finding) is not also I3's.
    One row per offending offset: the partition, the offset, where it was found, and how many data
    ranges cover it (0: an orphan, written without a committed range; 2 or more: claimed twice).
-#}
{% test rows_inside_committed_ranges(model, rejected, ledger) %}

with

output_rows as (

    select kafka_topic as topic, kafka_partition as partition, kafka_offset, 'output' as found_in
    from {{ model }}

),

rejected_rows as (

    select kafka_topic as topic, kafka_partition as partition, kafka_offset, 'rejected' as found_in
    from {{ rejected }}

),

data_ranges as (

    select topic, partition, start_offset, end_offset
    from {{ ledger }}
    where kind = 'data'

),

boundaries as (

    select topic, partition, start_offset as at_offset, 1 as delta from data_ranges
    union all
    select topic, partition, end_offset as at_offset, -1 as delta from data_ranges

),

sweep as (

    -- found_in is null for boundaries: they sort before the rows at the same offset
    select topic, partition, at_offset, delta, null::text as found_in from boundaries
    union all
    select topic, partition, kafka_offset, 0, found_in from output_rows
    union all
    select topic, partition, kafka_offset, 0, found_in from rejected_rows

),

covered as (

    select
        *,
        sum(delta) over (
            partition by topic, partition
            order by at_offset, found_in nulls first
            rows between unbounded preceding and current row
        ) as covering_ranges

    from sweep

),

offending as (

    select
        topic,
        partition,
        at_offset as kafka_offset,
        string_agg(distinct found_in, ' + ') as found_in,
        max(covering_ranges) as covering_data_ranges

    from covered
    where found_in is not null
    group by topic, partition, at_offset
    having max(covering_ranges) <> 1

)

select * from offending
order by topic, partition, kafka_offset

{% endtest %}
