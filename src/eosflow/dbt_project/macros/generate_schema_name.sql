{#-
    Schemas are named exactly as configured (`analytics`, `analytics_failures`), not dbt's default
    `<target schema>_<custom schema>`.

    The same project verifies any pipeline (var `pipeline`), and its views and tables would otherwise
    be shared: a check of pipeline A running while pipeline B's views are being replaced would read
    B's data. So every pipeline but the default `orders` gets schemas of its own, suffixed with its
    name: `analytics_t_1234`, `analytics_failures_t_1234`.
-#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {%- set base = (custom_schema_name or target.schema) | trim -%}
    {%- if var('pipeline') == 'orders' -%}
        {{ base }}
    {%- else -%}
        {{ base }}_{{ var('pipeline') }}
    {%- endif -%}
{%- endmacro %}
