{#-
    I4: for each data range of the ledger, the distinct offsets found in the output and rejected
    rows = records_read = rows_written + rows_rejected, and records_read <= end - start.

    Distinct offsets, so a record stored twice (I1's finding) does not also break I4. Counted per
    range with an index range scan of the rows (lateral), not a join of every row to every range.
    One row per offending range: the partition, the range and the four counts.
-#}
{% test range_counts_reconcile(model, output, rejected) %}

with

data_ranges as (

    select ledger_id, topic, partition, start_offset, end_offset, batch_id,
           records_read, rows_written, rows_rejected
    from {{ model }}
    where kind = 'data'

),

committed_rows as (

    select kafka_topic, kafka_partition, kafka_offset from {{ output }}
    union all
    select kafka_topic, kafka_partition, kafka_offset from {{ rejected }}

),

found_per_range as (

    select
        data_ranges.*,
        found.offsets_found

    from data_ranges
    cross join lateral (
        select count(distinct committed_rows.kafka_offset) as offsets_found
        from committed_rows
        where committed_rows.kafka_topic = data_ranges.topic
          and committed_rows.kafka_partition = data_ranges.partition
          and committed_rows.kafka_offset >= data_ranges.start_offset
          and committed_rows.kafka_offset < data_ranges.end_offset
    ) as found

),

mismatched as (

    select
        topic,
        partition,
        '[' || start_offset || ', ' || end_offset || ')' as range,
        start_offset,
        end_offset,
        records_read,
        rows_written,
        rows_rejected,
        offsets_found,
        batch_id

    from found_per_range
    where records_read <> offsets_found
       or records_read <> rows_written + rows_rejected
       or records_read > end_offset - start_offset

)

select * from mismatched
order by topic, partition, start_offset

{% endtest %}
