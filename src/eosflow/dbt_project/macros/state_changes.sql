{#-
    A change stream's last change per key, as its state invariants read the changelog (docs/DESIGN.md,
    "Change streams"); `gone` when it is a delete or older than the latest truncate.
-#}

{% macro last_changes_of(changelog, key) %}
    changes as (
        select
            *,
            row_number() over (
                partition by {{ key | join(', ') }}
                order by coalesce(change_lsn, -1) desc, kafka_partition desc, kafka_offset desc
            ) as place
        from {{ changelog }}
        where change_op in ('c', 'r', 'u', 'd')
    ),
    last_truncate as (
        select coalesce(change_lsn, -1) as lsn, kafka_partition as part, kafka_offset as off
        from {{ changelog }}
        where change_op = 't'
        order by 1 desc, 2 desc, 3 desc
        limit 1
    ),
    last_changes as (
        select
            changes.*,
            changes.change_op = 'd' or coalesce(
                (coalesce(changes.change_lsn, -1), changes.kafka_partition, changes.kafka_offset)
                < (t.lsn, t.part, t.off),
                false
            ) as gone
        from changes
        left join last_truncate t on true
        where changes.place = 1
    )
{% endmacro %}

{% macro present_in_state(alias, soft) %}
    {%- if soft %}({{ alias }}.deleted_at is null){% else %}true{% endif -%}
{% endmacro %}

