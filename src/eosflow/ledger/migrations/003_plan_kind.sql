-- Backfills: a plan is a scheduled ingest, a catch-up chunk (an explicit range from the stored
-- position, moves it) or a replay (re-reads a committed range, positions stay).
alter table eosflow.plans
    add column kind text not null default 'ingest' check (kind in ('ingest', 'catch-up', 'replay'));
