"""The warehouse side of planning: persisted plans and stored positions."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg

from eosflow.errors import PipelineConfigError
from eosflow.ledger.ranges import PartitionPlan, Plan
from eosflow.rows import one_row

if TYPE_CHECKING:  # a declaration loads the sinks, which import the ledger
    from eosflow.pipelines import Pipeline
    from eosflow.schema.declaration import RecordSchema


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


def refuse_a_moved_pipeline(conn: psycopg.Connection, pipeline: Pipeline) -> None:
    """A pipeline that committed keeps its output and its topics (its ranges describe rows there): another
    output, or a topic it holds positions in no longer declared, is refused before planning."""
    output = pipeline.sink.output
    conn.execute(
        "insert into eosflow.pipeline_outputs (pipeline, output) values (%s, %s) on conflict do nothing",
        (pipeline.name, output),
    )
    (recorded,) = one_row(
        conn.execute("select output from eosflow.pipeline_outputs where pipeline = %s", (pipeline.name,))
    )
    committed = has_committed(conn, pipeline.name)
    if recorded != output and committed:
        raise PipelineConfigError(
            f"pipeline {pipeline.name!r} committed into {recorded}, and its declaration now writes {output}: "
            f"its ledger's ranges describe rows in {recorded}, so continuing would leave the new output "
            "without them. Nothing was planned. Restore the declaration, or declare a new pipeline (a new "
            "name) for the new output: it reads the topics from their start (or its initial_offset)"
        )
    if recorded != output:  # changed before anything committed: the new one is the output
        conn.execute(
            "update eosflow.pipeline_outputs set output = %s, recorded_at = now() where pipeline = %s",
            (output, pipeline.name),
        )
    held = {
        t
        for (t,) in conn.execute(
            "select distinct topic from eosflow.positions where pipeline = %s and next_offset is not null",
            (pipeline.name,),
        )
    }
    if dropped := sorted(held - set(pipeline.topics)):
        raise PipelineConfigError(
            f"pipeline {pipeline.name!r} committed records of topic(s) {dropped}, which its declaration no "
            f"longer lists ({list(pipeline.topics)}). Nothing was planned. A pipeline's topics can be added "
            "to, not taken away: restore them, or declare a new pipeline for the topics it should read now"
        )


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
            recorded: int = found[0]
            return recorded
        inserted = conn.execute(
            "insert into eosflow.declarations (pipeline, version, fingerprint, declaration) "
            "select %s, coalesce(max(version), 0) + 1, %s, %s from eosflow.declarations where pipeline = %s "
            "returning version",
            (pipeline.name, fingerprint, pipeline.schema.canonical, pipeline.name),
        )
        version: int
        (version,) = one_row(inserted)
        return version


def renamed_columns(conn: psycopg.Connection, pipeline: str, schema: RecordSchema) -> dict[str, str]:
    """{new column: old column} for the columns the declaration renamed since the one recorded last
    before it (each reading the source the other read; eosflow.schema.evolution.renames)."""
    from eosflow.schema.declaration import DeclarationError, parse_path
    from eosflow.schema.evolution import renames

    fingerprint = hashlib.sha256(schema.canonical.encode()).hexdigest()
    row = conn.execute(
        "select declaration->'columns' from eosflow.declarations where pipeline = %s and fingerprint <> %s "
        "order by version desc limit 1",
        (pipeline, fingerprint),
    ).fetchone()
    before: dict[str, tuple[str | int, ...]] = {}
    for column in (row[0] if row is not None else None) or []:
        try:
            before[column["name"]] = parse_path(column.get("source") or f"$.{column['name']}", "")
        except (DeclarationError, KeyError, TypeError):
            continue  # a column written as no declaration reads now: nothing to tell of it
    return renames(before, {c.name: c.path for c in schema.columns})


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
    mark: int
    (mark,) = one_row(conn.execute("select coalesce(max(id), 0) from eosflow.ledger"))
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
