-- The read-only role of the Airflow view and the metrics (eosflow_reader) reads what the view shows and no
-- more (docs/DESIGN.md, "Trust boundaries"). Until now it could select every column of every table in
-- eosflow (rejected rows' raw payloads among them), every outbox a publisher had granted it, and, through
-- pg_read_all_stats, every session's query text. Now: SELECT on the tables the view reads, the rejected
-- rows' coordinates and reason without their raw key and value, and two functions eosflow owns for what
-- it needs of an outbox (a count) and of other sessions (which transactions are open, and for how long).

-- Each publisher and its outbox, recorded by the publisher's run (sources/outbox.py): the count of waiting
-- rows looks the table up here, so the reader names a publisher, never a table.
create table eosflow.publishers (
    publisher      text primary key,
    outbox_schema  text not null,
    outbox_table   text not null,
    recorded_at    timestamptz not null default now()
);

-- How many of a publisher's committed rows after `after_xid` a read cannot take yet (an older transaction
-- is still open): NULL when eosflow has no outbox with a position column for it (it never published).
-- SECURITY DEFINER: runs as eosflow's role, which reads the outbox; the caller gets a number, no rows.
create function eosflow.outbox_waiting(publisher_name text, after_xid xid8 default null)
returns bigint
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    outbox regclass;
    waiting bigint;
begin
    select to_regclass(format('%I.%I', p.outbox_schema, p.outbox_table)) into outbox
      from eosflow.publishers p
     where p.publisher = publisher_name;
    if outbox is null or not exists (
        select 1 from pg_attribute
         where attrelid = outbox and attname = 'eosflow_xid' and not attisdropped
    ) then
        return null;
    end if;
    execute format(
        'select count(*) from %s t where t.eosflow_xid >= pg_snapshot_xmin(pg_current_snapshot()) '
        'and ($1 is null or t.eosflow_xid > $1)',
        outbox
    ) into waiting using after_xid;
    return waiting;
end
$$;

-- The transactions open in the cluster for at least `older_than_s` seconds, oldest first: sessions holding
-- a transaction id (pid, database, user, application, state, age; never their query text) and prepared
-- transactions (gid). A publisher waits for every one of them. SECURITY DEFINER: pg_stat_activity shows
-- other roles' sessions' state and age only to members of pg_read_all_stats, so eosflow's role (this
-- function's owner) needs that role, and the reader does not; where the owner lacks it, other roles'
-- sessions come without state and age (NULL), last.
create function eosflow.open_transactions(older_than_s double precision default 0)
returns table (
    pid int,
    gid text,
    database text,
    username text,
    application_name text,
    state text,
    age_s double precision
)
language sql
security definer
set search_path = pg_catalog, pg_temp
as $$
    select *
      from (
        select a.pid, null::text, a.datname::text, a.usename::text, a.application_name, a.state,
               extract(epoch from now() - a.xact_start)::float8 as age_s
          from pg_stat_activity a
         where a.backend_xid is not null and a.pid <> pg_backend_pid()
        union all
        select null::int, p.gid, p.database::text, p.owner::text, null::text, 'prepared',
               extract(epoch from now() - p.prepared)::float8
          from pg_prepared_xacts p
      ) open
     where open.age_s is null or open.age_s >= older_than_s
     order by open.age_s desc nulls last
$$;

revoke execute on function eosflow.outbox_waiting(text, xid8) from public;
revoke execute on function eosflow.open_transactions(double precision) from public;

do $$
declare
    reader oid := (select oid from pg_roles where rolname = 'eosflow_reader');
    me oid := (select oid from pg_roles where rolname = current_user);
    found record;
begin
    if reader is null then
        return;  -- no reader here (yet): docs/readonly-role.sql makes one with these grants
    end if;
    -- No blanket SELECT, now or on tables made later: a later migration grants what the view reads.
    revoke select on all tables in schema eosflow from eosflow_reader;
    alter default privileges in schema eosflow revoke select on tables from eosflow_reader;
    grant usage on schema eosflow to eosflow_reader;
    grant select on eosflow.positions, eosflow.ledger, eosflow.plans, eosflow.checks,
        eosflow.publish_positions to eosflow_reader;
    grant select (pipeline, kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, error, batch_id)
        on eosflow.rejected to eosflow_reader;
    grant execute on function eosflow.outbox_waiting(text, xid8),
        eosflow.open_transactions(double precision) to eosflow_reader;
    -- What publishers granted the reader on their outboxes (SELECT on the table, USAGE on its schema), where
    -- this role granted it: the count goes through eosflow.outbox_waiting now.
    for found in
        select distinct c.oid::regclass::text as outbox, n.nspname
          from pg_class c
          join pg_namespace n on n.oid = c.relnamespace
          join pg_attribute a on a.attrelid = c.oid and a.attname = 'eosflow_xid' and not a.attisdropped
          cross join lateral aclexplode(c.relacl) acl
         where a.atttypid = 'xid8'::regtype and n.nspname <> 'eosflow'
           and acl.grantee = reader and acl.grantor = me and acl.privilege_type = 'SELECT'
    loop
        execute format('revoke select on %s from eosflow_reader', found.outbox);
    end loop;
    for found in
        select n.nspname
          from pg_namespace n
          cross join lateral aclexplode(n.nspacl) acl
         where n.nspname <> 'eosflow' and acl.grantee = reader and acl.grantor = me
           and acl.privilege_type = 'USAGE'
           and exists (
               select 1 from pg_class c
                 join pg_attribute a on a.attrelid = c.oid and a.attname = 'eosflow_xid'
                where c.relnamespace = n.oid and a.atttypid = 'xid8'::regtype and not a.attisdropped
           )
    loop
        execute format('revoke usage on schema %I from eosflow_reader', found.nspname);
    end loop;
end
$$;
