"""The warehouse sink's tables: the target made or evolved from the declaration, and the staging tables
a batch writes before its commit (made, dropped, and swept when a crashed run left them)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from eosflow.delivery import Delivery
from eosflow.errors import PipelineConfigError
from eosflow.ledger import store
from eosflow.names import owned_schema
from eosflow.rows import one_row
from eosflow.schema import ddl
from eosflow.sinks.protocol import Pipeline


def staging_table(batch_id: str) -> str:
    """staging.batch_<digest>: one unlogged table per batch, made by the stage step, dropped by the commit.

    A table of its own, without an index: the COPY maintains nothing but the rows, and the commit
    drops the table instead of deleting a million rows from a shared one (which also left it bloated).
    """
    return f"staging.batch_{hashlib.sha256(batch_id.encode()).hexdigest()[:20]}"


def create_staging(conn: psycopg.Connection, pipeline: Pipeline, batch_id: str) -> str:
    """A fresh, empty staging table for the batch (any earlier attempt's table is dropped first)."""
    name = staging_table(batch_id)
    table = sql.SQL(name)
    with conn.transaction():
        conn.execute(sql.SQL("drop table if exists {}").format(table))
        conn.execute(
            sql.SQL("create unlogged table {} (like {} including defaults)").format(
                table, sql.SQL(pipeline.target_table)
            )
        )
        conn.execute(
            sql.SQL("comment on table {} is {}").format(
                table, sql.Literal(f"eosflow staging of batch {batch_id} for {pipeline.target_table}")
            )
        )  # sweep_staging reads the batch id back from this comment
        conn.execute("delete from staging.rejected where batch_id = %s", (batch_id,))
    return name


def drop_ranges(conn: psycopg.Connection, batch_id: str) -> None:
    """Drop the batch's staged range children (eosflow.sinks.postgres.stage.range_writer) and forget them."""
    for (child,) in conn.execute(
        "delete from staging.ranges where batch_id = %s returning child", (batch_id,)
    ).fetchall():
        conn.execute(sql.SQL("drop table if exists {}").format(sql.Identifier(*child.split("."))))


# A batch's staging outlives it only when its run died before the commit (a kill, a lost machine):
# a retry with the same run id re-stages anyway, so after this long nobody will commit it.
STAGING_TTL_HOURS = 24


_STAGING_COMMENT = re.compile(r"eosflow staging of batch (.*) for [a-z0-9_]+\.[a-z0-9_]+", re.S)


@contextmanager
def holding_batch(conn: psycopg.Connection, batch_id: str) -> Iterator[None]:
    """Keep other runs' sweeps off the batch's staging while this session holds it, across
    transactions (a session-level advisory lock on the batch id)."""
    key = _batch_lock_key(batch_id)
    conn.execute("select pg_advisory_lock(hashtext(%s))", (key,))
    try:
        yield
    finally:
        if not conn.closed:
            conn.execute("select pg_advisory_unlock(hashtext(%s))", (key,))


def _batch_lock_key(batch_id: str) -> str:
    return f"eosflow.staging:{batch_id}"


def sweep_staging(conn: psycopg.Connection, log: Callable[[str], None] = lambda m: None) -> list[str]:
    """Drop staging left by batches that can no longer commit; returns the batch ids swept.

    A batch's staging goes when its plan is committed (a run killed after its commit), or was made
    more than STAGING_TTL_HOURS ago and never committed. A table some run still holds is skipped, and
    so is a batch a run holds (`holding_batch`: at_most_once's output, after its positions committed).
    """
    tables = conn.execute(
        "select c.relname, obj_description(c.oid, 'pg_class') from pg_class c "
        "join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = 'staging' and c.relname like 'batch\\_%%' and c.relkind = 'r'"
    ).fetchall()
    staged = {
        name: found.group(1)
        for name, comment in tables
        if (found := _STAGING_COMMENT.fullmatch(comment or ""))
    }
    rejected = [r[0] for r in conn.execute("select distinct batch_id from staging.rejected").fetchall()]
    ranged = [r[0] for r in conn.execute("select distinct batch_id from staging.ranges").fetchall()]
    batches = sorted(set(staged.values()) | set(rejected) | set(ranged))
    if not batches:
        return []
    stale = {
        row[0]
        for row in conn.execute(
            "select b from unnest(%s::text[]) b left join eosflow.plans p on p.batch_id = b "
            "where p.batch_id is null or p.status = 'committed' "
            "or p.created_at < now() - make_interval(hours => %s)",
            (batches, STAGING_TTL_HOURS),
        ).fetchall()
    }
    swept = []
    for batch_id in sorted(stale):
        try:
            with conn.transaction():
                conn.execute("set local lock_timeout = '200ms'")
                held = one_row(
                    conn.execute(
                        "select not pg_try_advisory_xact_lock(hashtext(%s))", (_batch_lock_key(batch_id),)
                    )
                )[0]
                if held:
                    continue
                for name, owner in staged.items():
                    if owner == batch_id:
                        conn.execute(sql.SQL("drop table if exists staging.{}").format(sql.Identifier(name)))
                conn.execute("delete from staging.rejected where batch_id = %s", (batch_id,))
                drop_ranges(conn, batch_id)
        except psycopg.errors.LockNotAvailable:
            continue  # a run is still using it; the next sweep will see
        swept.append(batch_id)
    if swept:
        log(f"dropped the staging of {len(swept)} batch(es) that can no longer commit: {', '.join(swept)}")
    return swept


def ensure_target(conn: psycopg.Connection, pipeline: Pipeline, log: Callable[[str], None]) -> None:
    """The pipeline's output table as declared: made if missing, else brought to the declaration where
    that loses nothing (eosflow.schema.ddl.migration: a new optional column, a widening, a NOT NULL
    dropped); anything else is refused before a record is read."""
    schema, table = pipeline.target_table.split(".")
    target = sql.Identifier(schema, table)
    keyed = pipeline.delivery == Delivery.EXACTLY_ONCE
    with conn.transaction():
        # `create ... if not exists` races in the catalog when two runs of a new pipeline start at once.
        conn.execute(
            "select pg_advisory_xact_lock(hashtext(%s))", (f"eosflow.ensure_target:{pipeline.target_table}",)
        )
        conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(schema)))
        conn.execute(ddl.create_table(pipeline.target_table, pipeline.schema, keyed=keyed))
        try:
            migration = ddl.migration(
                pipeline.target_table,
                pipeline.schema,
                existing_columns(conn, pipeline.target_table),
                pipeline.name,
                renamed=store.renamed_columns(conn, pipeline.name, pipeline.schema),
            )
        except ddl.IncompatibleTargetError as exc:
            raise PipelineConfigError(str(exc)) from None
        if migration.retypes:
            clear_views(conn, pipeline, pipeline.target_table, log)
        for statement in migration.statements:
            conn.execute(statement)
        for note in migration.notes:
            log(note)
        if not keyed:
            # The comparison modes write where a plain consumer would: a table without the offsets'
            # key, so the duplicates at-least-once produces land and can be counted, not refused.
            conn.execute(
                sql.SQL(
                    "create index if not exists {} on {} (kafka_topic, kafka_partition, kafka_offset)"
                ).format(sql.Identifier(f"{table}_offsets"), target)
            )
            _refuse_keyed_target(conn, pipeline)


def clear_views(conn: psycopg.Connection, pipeline: Pipeline, table: str, log: Callable[[str], None]) -> None:
    """Before a column of `table` changes type (Postgres refuses that under a view reading the table):
    dbt's views on it (in dbt's schemas: its staging views, built again by the next `eosflow verify`) are
    dropped; any other view refuses the change, named with what to do."""
    views = conn.execute(
        "select distinct n.nspname, v.relname from pg_depend d "
        "join pg_rewrite r on r.oid = d.objid join pg_class v on v.oid = r.ev_class "
        "join pg_namespace n on n.oid = v.relnamespace "
        "where d.classid = 'pg_rewrite'::regclass and d.refclassid = 'pg_class'::regclass "
        "and d.refobjid = %s::regclass and v.oid <> d.refobjid order by 1, 2",
        (table,),
    ).fetchall()
    others = [f"{schema}.{name}" for schema, name in views if owned_schema(schema) != "dbt"]
    if others:
        raise PipelineConfigError(
            f"pipeline {pipeline.name!r}: the declaration widens a column of {table}, and Postgres cannot "
            f"change a column's type while a view reads the table: {', '.join(others)}. Drop the view(s), "
            "run again (the column is widened, nothing else changes), then create them again"
        )
    for schema, name in views:
        conn.execute(sql.SQL("drop view if exists {}").format(sql.Identifier(schema, name)))
        log(
            f"{table}: dropped dbt's view {schema}.{name} to widen a column (the next verify builds it again)"
        )


def existing_columns(conn: psycopg.Connection, table: str) -> list[ddl.Existing]:
    """The table's columns as its catalog holds them (format_type's spelling)."""
    rows = conn.execute(
        "select attname, format_type(atttypid, atttypmod), attnotnull from pg_attribute "
        "where attrelid = %s::regclass and attnum > 0 and not attisdropped order by attnum",
        (table,),
    ).fetchall()
    return [ddl.Existing(name, type_, not_null) for name, type_, not_null in rows]


def _refuse_keyed_target(conn: psycopg.Connection, pipeline: Pipeline) -> None:
    (keyed,) = one_row(
        conn.execute(
            "select exists (select 1 from pg_index where indrelid = %s::regclass and indisunique)",
            (pipeline.target_table,),
        )
    )
    if keyed:
        raise PipelineConfigError(
            f"pipeline {pipeline.name!r}: delivery {pipeline.delivery} needs a target without a unique key, "
            f"but {pipeline.target_table} has one (made for exactly_once). Point the pipeline at a new "
            "target_table, or use delivery: exactly_once."
        )
