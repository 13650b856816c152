{{ config(enabled=(var('state_table', '') != '')) }}

-- A change stream's state table (docs/DESIGN.md, "Change streams"): one row per primary key.
select * from {{ source('state', 'current') }}
