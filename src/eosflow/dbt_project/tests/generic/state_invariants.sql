{#-
    The state invariants of a change stream (docs/DESIGN.md, "Change streams"): the state table is exactly
    the changelog's last change per key. Applied to the state model; `changelog` is the pipeline's output.
    A change's order: (coalesce(change_lsn, -1), kafka_partition, kafka_offset).
-#}

{#- S1: every key in the state table holds its last committed change: its position, and every column (the
    changelog holds each change's whole row: a TOASTed column Debezium left out is filled in it at commit). -#}
{% test state_holds_last_changes(model, changelog, key, columns, soft) %}
with
{{ last_changes_of(changelog, key) }},
compared as (
    select
        {% for k in key %}s.{{ k }}, {% endfor %}
        'state at ' || s.kafka_topic || '[' || s.kafka_partition || ']@' || s.kafka_offset
            || ', last change at ' || l.kafka_topic || '[' || l.kafka_partition || ']@' || l.kafka_offset
            as positions,
        array_remove(array[
            {% for c in columns %}
            case when s.{{ c }} is distinct from l.{{ c }} then '{{ c }}' end{% if not loop.last %},{% endif %}
            {% endfor %}
        ], null) as differing,
        (s.kafka_topic, s.kafka_partition, s.kafka_offset)
            is distinct from (l.kafka_topic, l.kafka_partition, l.kafka_offset) as moved
    from {{ model }} s
    join last_changes l using ({{ key | join(', ') }})
    where not l.gone and {{ present_in_state('s', soft) }}
)
select * from compared where moved or cardinality(differing) > 0
{% endtest %}

{#- S2: no key whose last committed change is a delete (or older than a later truncate) is present
    (soft deletes: present only with deleted_at). -#}
{% test state_holds_no_deleted_key(model, changelog, key, soft) %}
with
{{ last_changes_of(changelog, key) }}
select {% for k in key %}s.{{ k }}, {% endfor %}l.change_op as last_op, l.kafka_partition, l.kafka_offset
from {{ model }} s
join last_changes l using ({{ key | join(', ') }})
where l.gone and {{ present_in_state('s', soft) }}
{% endtest %}

{#- S3: every key whose last committed change is an insert, a snapshot read or an update is present. -#}
{% test state_holds_every_live_key(model, changelog, key, soft) %}
with
{{ last_changes_of(changelog, key) }}
select {% for k in key %}l.{{ k }}, {% endfor %}l.change_op as last_op, l.kafka_partition, l.kafka_offset
from last_changes l
left join {{ model }} s using ({{ key | join(', ') }})
where not l.gone and (s.{{ key[0] }} is null or not {{ present_in_state('s', soft) }})
{% endtest %}
