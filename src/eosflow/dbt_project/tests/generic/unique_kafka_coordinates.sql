{#-
    I1: no (topic, partition, offset) appears twice across the output and rejected rows.
    Applied to the output model; `rejected` is the pipeline's rejected rows.
    One row per duplicated coordinate: the partition, the offset, how many copies and where.
-#}
{% test unique_kafka_coordinates(model, rejected) %}

with

output_rows as (

    select kafka_topic, kafka_partition, kafka_offset, 'output' as found_in
    from {{ model }}

),

rejected_rows as (

    select kafka_topic, kafka_partition, kafka_offset, 'rejected' as found_in
    from {{ rejected }}

),

committed_rows as (

    select * from output_rows
    union all
    select * from rejected_rows

),

duplicated as (

    select
        kafka_topic as topic,
        kafka_partition as partition,
        kafka_offset,
        count(*) as copies,
        string_agg(found_in, ' + ' order by found_in) as found_in

    from committed_rows
    group by kafka_topic, kafka_partition, kafka_offset
    having count(*) > 1

)

select * from duplicated
order by topic, partition, kafka_offset

{% endtest %}
