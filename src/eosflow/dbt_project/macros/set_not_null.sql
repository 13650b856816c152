{#-
    `alter table ... set not null` once: a table that already has it is not scanned and locked again on
    every incremental run. For a publisher's id column (the publisher refuses one that can be NULL).
-#}
{% macro set_not_null(relation, column) -%}
do $$
begin
    if exists (
        select 1 from pg_attribute
        where attrelid = '{{ relation }}'::regclass and attname = '{{ column }}' and not attnotnull
    ) then
        alter table {{ relation }} alter column {{ column }} set not null;
    end if;
end
$$
{%- endmacro %}
