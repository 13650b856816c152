-- Exactly-once targets are partitioned by offset range (eosflow.sinks.postgres.partitions). raw.orders was
-- made by migration 002, before targets were made from their declarations; on a warehouse where it
-- never received a row it is dropped here, and the orders pipeline's first run makes it again,
-- partitioned, from pipelines.yml. One holding rows stays as it is (its commits still work) until
-- `eosflow partition --pipeline orders` migrates it.
do $$
begin
    if to_regclass('raw.orders') is not null
       and (select relkind from pg_class where oid = 'raw.orders'::regclass) = 'r' then
        if not exists (select 1 from raw.orders) then
            drop table raw.orders cascade;
        end if;
    end if;
end
$$;
