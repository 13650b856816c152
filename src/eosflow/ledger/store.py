"""The warehouse side of planning: persisted plans and stored positions."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from eosflow.ledger.ranges import PartitionPlan, Plan
from eosflow.pipelines import Pipeline, PipelineConfigError
from eosflow.schema import ddl


def positions(conn: psycopg.Connection, pipeline: str, topic: str) -> dict[int, int | None]:
    rows = conn.execute(
        "select partition, next_offset from eosflow.positions where pipeline = %s and topic = %s",
        (pipeline, topic),
    ).fetchall()
    return {partition: next_offset for partition, next_offset in rows}


def stored_topic_ids(conn: psycopg.Connection, pipeline: str, topic: str) -> dict[int, str | None]:
    """partition -> Kafka's id of the topic its position counts in (None: not known yet)."""
    rows = conn.execute(
        "select partition, topic_id from eosflow.positions where pipeline = %s and topic = %s",
        (pipeline, topic),
    ).fetchall()
    return {partition: topic_id for partition, topic_id in rows}


def replays(conn: psycopg.Connection, pipeline: str, topic: str, partition: int) -> int:
    """How many replays of the partition have committed: a replay plan records it to be fenced on."""
    row = conn.execute(
        "select replays from eosflow.positions where pipeline = %s and topic = %s and partition = %s",
        (pipeline, topic, partition),
    ).fetchone()
    return row[0] if row else 0


def committed_span(conn: psycopg.Connection, pipeline: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (first committed start, stored position): the range a replay may cover."""
    rows = conn.execute(
        "select l.partition, min(l.start_offset), p.next_offset from eosflow.ledger l "
        "join eosflow.positions p using (pipeline, topic, partition) "
        "where l.pipeline = %s and l.topic = %s and l.kind = 'data' and p.next_offset is not null "
        "group by l.partition, p.next_offset",
        (pipeline, topic),
    ).fetchall()
    return {partition: (first, position) for partition, first, position in rows}


def has_committed(conn: psycopg.Connection, pipeline: str) -> bool:
    row = conn.execute(
        "select 1 from eosflow.positions where pipeline = %s and next_offset is not null limit 1", (pipeline,)
    ).fetchone()
    return row is not None


def load_plan(conn: psycopg.Connection, batch_id: str) -> tuple[Plan, str] | None:
    row = conn.execute(
        "select pipeline, run_id, partitions, status, kind, declaration_version from eosflow.plans "
        "where batch_id = %s",
        (batch_id,),
    ).fetchone()
    if row is None:
        return None
    pipeline, run_id, parts, status, kind, version = row
    partitions = tuple(PartitionPlan.from_json(p) for p in parts)
    return Plan(batch_id, pipeline, run_id, partitions, kind, version), status


def save_plan(conn: psycopg.Connection, plan: Plan) -> Plan:
    """Persist a new plan, or return the one a concurrent run with the same batch_id saved first.

    Position rows are created (NULL: never committed) for every planned partition, so the commit
    always has a row to lock, even for a partition's very first range.
    """
    with conn.transaction():
        inserted = conn.execute(
            "insert into eosflow.plans (batch_id, pipeline, run_id, partitions, kind, declaration_version) "
            "values (%s, %s, %s, %s, %s, %s) on conflict (batch_id) do nothing returning batch_id",
            (
                plan.batch_id,
                plan.pipeline,
                plan.run_id,
                json.dumps(plan.to_json()),
                plan.kind,
                plan.declaration_version,
            ),
        ).fetchone()
        for r in plan.ranges:
            conn.execute(
                "insert into eosflow.positions (pipeline, topic, partition, next_offset) "
                "values (%s, %s, %s, null) on conflict do nothing",
                (plan.pipeline, r.topic, r.partition),
            )
    if inserted is None:
        existing = load_plan(conn, plan.batch_id)
        assert existing is not None
        return existing[0]
    return plan


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


def sweep_staging(conn: psycopg.Connection, log: Callable[[str], None] = lambda m: None) -> list[str]:
    """Drop staging left by batches that can no longer commit; returns the batch ids swept.

    A batch's staging goes when its plan is committed (a run killed after its commit), or was made
    more than STAGING_TTL_HOURS ago and never committed. A table some run still holds is skipped.
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


def ensure_target(conn: psycopg.Connection, pipeline: Pipeline) -> None:
    """The pipeline's output table as declared: made if missing, optional columns added if new.

    Anything else that differs from the declaration is refused (eosflow.schema.ddl), before a
    record is read.
    """
    schema, table = pipeline.target_table.split(".")
    target = sql.Identifier(schema, table)
    keyed = pipeline.delivery == "exactly_once"
    with conn.transaction():
        # `create ... if not exists` races in the catalog when two runs of a new pipeline start at once.
        conn.execute(
            "select pg_advisory_xact_lock(hashtext(%s))", (f"eosflow.ensure_target:{pipeline.target_table}",)
        )
        conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(schema)))
        conn.execute(ddl.create_table(pipeline.target_table, pipeline.schema, keyed=keyed))
        try:
            statements = ddl.additions(
                pipeline.target_table,
                pipeline.schema,
                _existing_columns(conn, pipeline.target_table),
                pipeline.name,
            )
        except ddl.IncompatibleTargetError as exc:
            raise PipelineConfigError(str(exc)) from None
        for statement in statements:
            conn.execute(statement)
        if not keyed:
            # The comparison modes write where a plain consumer would: a table without the offsets'
            # key, so the duplicates at-least-once produces land and can be counted, not refused.
            conn.execute(
                sql.SQL(
                    "create index if not exists {} on {} (kafka_topic, kafka_partition, kafka_offset)"
                ).format(sql.Identifier(f"{table}_offsets"), target)
            )
            _refuse_keyed_target(conn, pipeline)


def _existing_columns(conn: psycopg.Connection, table: str) -> list[ddl.Existing]:
    rows = conn.execute(
        "select attname, format_type(atttypid, atttypmod), attnotnull from pg_attribute "
        "where attrelid = %s::regclass and attnum > 0 and not attisdropped order by attnum",
        (table,),
    ).fetchall()
    return [ddl.Existing(name, type_, not_null) for name, type_, not_null in rows]


def declaration_version(conn: psycopg.Connection, pipeline: Pipeline) -> int:
    """The version of the pipeline's declaration as it is now: the one recorded for the same
    declaration, or the next one, recorded now."""
    fingerprint = hashlib.sha256(pipeline.schema.canonical.encode()).hexdigest()
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(hashtext(%s))", (f"eosflow.declarations:{pipeline.name}",))
        found = conn.execute(
            "select version from eosflow.declarations where pipeline = %s and fingerprint = %s",
            (pipeline.name, fingerprint),
        ).fetchone()
        if found is not None:
            return found[0]
        (version,) = conn.execute(
            "insert into eosflow.declarations (pipeline, version, fingerprint, declaration) "
            "select %s, coalesce(max(version), 0) + 1, %s, %s from eosflow.declarations where pipeline = %s "
            "returning version",
            (pipeline.name, fingerprint, pipeline.schema.canonical, pipeline.name),
        ).fetchone()
        return version


def _refuse_keyed_target(conn: psycopg.Connection, pipeline: Pipeline) -> None:
    (keyed,) = conn.execute(
        "select exists (select 1 from pg_index where indrelid = %s::regclass and indisunique)",
        (pipeline.target_table,),
    ).fetchone()
    if keyed:
        raise PipelineConfigError(
            f"pipeline {pipeline.name!r}: delivery {pipeline.delivery} needs a target without a unique key, "
            f"but {pipeline.target_table} has one (made for exactly_once). Point the pipeline at a new "
            "target_table, or use delivery: exactly_once."
        )


def committed_counts(conn: psycopg.Connection, batch_id: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (read, written, rejected) as the ledger recorded a batch's data ranges."""
    rows = conn.execute(
        "select topic, partition, records_read, rows_written, rows_rejected from eosflow.ledger "
        "where batch_id = %s and kind <> 'lost'",
        (batch_id,),
    ).fetchall()
    return {(t, p): (r, w, j) for t, p, r, w, j in rows}


def ledger_mark(conn: psycopg.Connection) -> int:
    """The ledger's newest row id: the rows a run commits after this call all have larger ids."""
    (mark,) = conn.execute("select coalesce(max(id), 0) from eosflow.ledger").fetchone()
    return mark


@dataclass(frozen=True)
class Committed:
    """What one orchestrator run committed after a mark: the ledger rows of its plans."""

    ranges: tuple[str, ...]  # "topic[partition] [start, end) kind", in commit order
    records_read: int
    rows_written: int
    rows_rejected: int

    def line(self) -> str:
        return (
            f"{len(self.ranges)} range(s), {self.records_read:,} records read, {self.rows_written:,} rows "
            f"written, {self.rows_rejected:,} rejected"
        )


def committed_since(conn: psycopg.Connection, pipeline: str, run_id: str, mark: int) -> Committed:
    """The ranges the run `run_id` of `pipeline` committed after `ledger_mark` returned `mark`.

    A plan found already committed (a cleared run) adds no ledger row, so it counts nothing.
    """
    rows = conn.execute(
        "select l.topic, l.partition, l.start_offset, l.end_offset, l.kind, l.records_read, "
        "l.rows_written, l.rows_rejected from eosflow.ledger l join eosflow.plans p using (batch_id) "
        "where l.pipeline = %s and p.run_id = %s and l.id > %s order by l.id",
        (pipeline, run_id, mark),
    ).fetchall()
    return Committed(
        tuple(f"{t}[{p}] [{s}, {e}) {k}" for t, p, s, e, k, *_ in rows),
        sum(r[5] for r in rows),
        sum(r[6] for r in rows),
        sum(r[7] for r in rows),
    )
