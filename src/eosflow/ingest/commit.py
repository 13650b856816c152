"""Step 5 of the contract: output, rejected rows, ledger and positions in ONE transaction.

(Unless the pipeline asks for at_least_once or at_most_once: those split the commit in two, in
the order DESIGN.md gives, so the lab can show what the split costs.)

Either all of a batch becomes visible with its ranges, or none of it does. A retry of a batch
that already committed finds its ledger rows and does nothing; a run whose plan no longer
matches the stored positions (stale plan, zombie, concurrent run) is fenced and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psycopg
from psycopg import sql

from eosflow.faults import fault_point
from eosflow.ingest.pipelines import Pipeline
from eosflow.ingest.ranges import OffsetRange, Plan
from eosflow.ingest.store import staging_table

COMMITTED = "committed"
ALREADY_COMMITTED = "already committed"


class FencedError(RuntimeError):
    """Another run moved a position this plan starts from; nothing was written."""


class StagingIncompleteError(RuntimeError):
    """The staged rows do not add up to what was read; nothing was written."""


@dataclass(frozen=True)
class PartitionCounts:
    read: int  # records Spark read in the planned range
    written: int = 0  # output rows committed
    rejected: int = 0  # rejected rows committed


Key = tuple[str, int]  # (topic, partition)


def commit(
    conn: psycopg.Connection, pipeline: Pipeline, plan: Plan, records_read: Mapping[Key, int]
) -> tuple[str, dict[Key, PartitionCounts]]:
    """Commit one batch under the pipeline's delivery mode; returns the outcome and committed counts."""
    if pipeline.delivery == "at_least_once":
        return _commit_output_then_positions(conn, pipeline, plan, records_read)
    if pipeline.delivery == "at_most_once":
        return _commit_positions_then_output(conn, pipeline, plan, records_read)
    stage = sql.SQL(staging_table(plan.batch_id))
    with conn.transaction():
        locked = _lock_positions(conn, plan)
        if _already_committed(conn, plan.batch_id):
            _clear_staging(conn, stage, plan.batch_id)
            return ALREADY_COMMITTED, {}
        _check_fencing(plan, locked)
        counts = _staged_counts(conn, stage, pipeline, plan, records_read)
        _publish_staged(conn, pipeline, plan, stage, sql.SQL(pipeline.target_table))
        _advance(conn, plan, counts)
        _finish(conn, stage, plan)
        fault_point("in_commit")
    return COMMITTED, counts


def _commit_output_then_positions(
    conn: psycopg.Connection, pipeline: Pipeline, plan: Plan, records_read: Mapping[Key, int]
) -> tuple[str, dict[Key, PartitionCounts]]:
    """at_least_once: the output commits first; a crash before the positions do re-delivers it."""
    stage = sql.SQL(staging_table(plan.batch_id))
    with conn.transaction():
        if _already_committed(conn, plan.batch_id):
            _clear_staging(conn, stage, plan.batch_id)
            return ALREADY_COMMITTED, {}
        counts = _staged_counts(conn, stage, pipeline, plan, records_read)
        _publish_staged(conn, pipeline, plan, stage, sql.SQL(pipeline.target_table))
        _clear_staging(conn, stage, plan.batch_id)
    fault_point("in_commit")  # output visible, positions not moved: the duplicate window
    with conn.transaction():
        _check_fencing(plan, _lock_positions(conn, plan))
        _advance(conn, plan, counts)
        _finish(conn, stage, plan)
    return COMMITTED, counts


def _commit_positions_then_output(
    conn: psycopg.Connection, pipeline: Pipeline, plan: Plan, records_read: Mapping[Key, int]
) -> tuple[str, dict[Key, PartitionCounts]]:
    """at_most_once: the positions commit first; a crash before the output does loses it."""
    stage = sql.SQL(staging_table(plan.batch_id))
    with conn.transaction():
        locked = _lock_positions(conn, plan)
        if _already_committed(conn, plan.batch_id):
            _clear_staging(conn, stage, plan.batch_id)
            return ALREADY_COMMITTED, {}
        _check_fencing(plan, locked)
        counts = _staged_counts(conn, stage, pipeline, plan, records_read)
        _advance(conn, plan, counts)
        conn.execute(
            "update eosflow.plans set status = 'committed', committed_at = now() where batch_id = %s",
            (plan.batch_id,),
        )
    fault_point("in_commit")  # positions moved, output not written: the loss window
    with conn.transaction():
        _publish_staged(conn, pipeline, plan, stage, sql.SQL(pipeline.target_table))
        _clear_staging(conn, stage, plan.batch_id)
    return COMMITTED, counts


def _advance(conn: psycopg.Connection, plan: Plan, counts: Mapping[Key, PartitionCounts]) -> None:
    """One ledger row per range (and per acknowledged loss), and the positions moved to the ends."""
    for part in plan.partitions:
        r, key = part.range, (part.range.topic, part.range.partition)
        if part.lost is not None:
            _ledger(conn, plan, part.lost, "lost", PartitionCounts(0))
        if not r.empty or part.first_seen:
            # An empty first range still goes in: it fixes where the partition's history starts.
            _ledger(conn, plan, r, "data", counts[key])
            conn.execute(
                "update eosflow.positions set next_offset = %s, updated_at = now() "
                "where pipeline = %s and topic = %s and partition = %s",
                (r.end, plan.pipeline, r.topic, r.partition),
            )


def _lock_positions(conn: psycopg.Connection, plan: Plan) -> dict[Key, int | None]:
    # Partition order everywhere, so two commits of one pipeline can never deadlock.
    rows = conn.execute(
        "select topic, partition, next_offset from eosflow.positions "
        "where pipeline = %s and (topic, partition) in (select * from unnest(%s::text[], %s::int[])) "
        "order by topic, partition for update",
        (plan.pipeline, [r.topic for r in plan.ranges], [r.partition for r in plan.ranges]),
    ).fetchall()
    return {(topic, partition): next_offset for topic, partition, next_offset in rows}


def _check_fencing(plan: Plan, locked: Mapping[Key, int | None]) -> None:
    moved = []
    for part in plan.partitions:
        key = (part.range.topic, part.range.partition)
        expected = None if part.first_seen else (part.lost.start if part.lost else part.range.start)
        if key not in locked or locked[key] != expected:
            found = locked.get(key, "no position row")
            moved.append(
                f"{part.range.topic}[{part.range.partition}] planned from {expected}, position is now {found}"
            )
    if moved:
        raise FencedError(
            f"batch {plan.batch_id} is fenced: another run committed these partitions since it was planned "
            f"({'; '.join(moved)}). Nothing was written. This is the protection against zombies and "
            "concurrent runs working; start a new run (new run id) to continue from the stored positions."
        )


def _staged_counts(
    conn: psycopg.Connection,
    stage: sql.Composable,
    pipeline: Pipeline,
    plan: Plan,
    records_read: Mapping[Key, int],
) -> dict[Key, PartitionCounts]:
    written = (
        dict(conn.execute(sql.SQL("select kafka_partition, count(*) from {} group by 1").format(stage)))
        if _exists(conn, stage)
        else {}  # nothing was staged: a plan with no records to read, or a step skipped (caught below)
    )
    rejected = dict(
        conn.execute(
            "select kafka_partition, count(*) from staging.rejected "
            "where batch_id = %s and pipeline = %s group by 1",
            (plan.batch_id, pipeline.name),
        ).fetchall()
    )
    counts: dict[Key, PartitionCounts] = {}
    wrong = []
    for r in plan.ranges:
        key = (r.topic, r.partition)
        c = PartitionCounts(
            records_read.get(key, 0), written.get(r.partition, 0), rejected.get(r.partition, 0)
        )
        if c.written + c.rejected != c.read:
            wrong.append(f"{r}: read {c.read}, staged {c.written} rows + {c.rejected} rejected")
        counts[key] = c
    if wrong:
        raise StagingIncompleteError(
            f"batch {plan.batch_id}: staging does not add up to what was read ({'; '.join(wrong)}). "
            "Nothing was committed; re-run the same run id to re-stage the batch."
        )
    return counts


def _ledger(conn: psycopg.Connection, plan: Plan, r: OffsetRange, kind: str, c: PartitionCounts) -> None:
    conn.execute(
        "insert into eosflow.ledger (pipeline, topic, partition, start_offset, end_offset, kind, batch_id, "
        "records_read, rows_written, rows_rejected) values (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            plan.pipeline,
            r.topic,
            r.partition,
            r.start,
            r.end,
            kind,
            plan.batch_id,
            c.read,
            c.written,
            c.rejected,
        ),
    )


def _publish_staged(
    conn: psycopg.Connection, pipeline: Pipeline, plan: Plan, stage: sql.Composable, target: sql.Composable
) -> None:
    """The staged output and rejected rows of the batch, into their tables."""
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in _columns(conn, pipeline.target_table))
    if _exists(conn, stage):
        conn.execute(sql.SQL("insert into {} ({}) select {} from {}").format(target, columns, columns, stage))
    # The rejected table is shared and keyed; a record re-delivered under at_least_once is already
    # there as rejected, and the duplicate that matters shows in the output.
    again = "" if pipeline.delivery == "exactly_once" else " on conflict do nothing"
    conn.execute(
        "insert into eosflow.rejected select * from staging.rejected where batch_id = %s and pipeline = %s"
        + again,
        (plan.batch_id, pipeline.name),
    )


def _finish(conn: psycopg.Connection, stage: sql.Composable, plan: Plan) -> None:
    """Mark the plan committed and drop the batch's staging; the last statements before COMMIT."""
    conn.execute(
        "update eosflow.plans set status = 'committed', committed_at = now() where batch_id = %s",
        (plan.batch_id,),
    )
    _clear_staging(conn, stage, plan.batch_id)


def _clear_staging(conn: psycopg.Connection, stage: sql.Composable, batch_id: str) -> None:
    conn.execute(sql.SQL("drop table if exists {}").format(stage))
    conn.execute("delete from staging.rejected where batch_id = %s", (batch_id,))


def _exists(conn: psycopg.Connection, table: sql.Composable) -> bool:
    (oid,) = conn.execute("select to_regclass(%s)", (table.as_string(conn),)).fetchone()
    return oid is not None


def _columns(conn: psycopg.Connection, table: str) -> list[str]:
    schema, name = table.split(".")
    return [
        row[0]
        for row in conn.execute(
            "select column_name from information_schema.columns where table_schema = %s and table_name = %s "
            "order by ordinal_position",
            (schema, name),
        ).fetchall()
    ]


class ReplayOutsideCommittedError(RuntimeError):
    """A replay may only re-read offsets that are committed."""


def commit_replay(
    conn: psycopg.Connection, pipeline: Pipeline, plan: Plan, records_read: Mapping[Key, int]
) -> tuple[str, dict[Key, PartitionCounts]]:
    """Replace the rows of already committed ranges with their re-read versions; positions stay.

    The position rows are locked as in a normal commit, so a replay and a normal run of the same
    partition never interleave their commits.
    """
    stage = sql.SQL(staging_table(plan.batch_id))
    target = sql.SQL(pipeline.target_table)
    with conn.transaction():
        locked = _lock_positions(conn, plan)
        if _already_committed(conn, plan.batch_id):
            _clear_staging(conn, stage, plan.batch_id)
            return ALREADY_COMMITTED, {}
        beyond = [str(r) for r in plan.ranges if (locked.get((r.topic, r.partition)) or 0) < r.end]
        if beyond:
            raise ReplayOutsideCommittedError(
                f"replay {plan.batch_id}: {', '.join(beyond)} reaches past the committed position; "
                "nothing was written. Replay only committed offsets, or catch up first."
            )
        counts = _staged_counts(conn, stage, pipeline, plan, records_read)
        for r in plan.ranges:
            where = (r.topic, r.partition, r.start, r.end)
            conn.execute(
                sql.SQL(
                    "delete from {} where kafka_topic = %s and kafka_partition = %s "
                    "and kafka_offset >= %s and kafka_offset < %s"
                ).format(target),
                where,
            )
            conn.execute(
                "delete from eosflow.rejected where pipeline = %s and kafka_topic = %s "
                "and kafka_partition = %s and kafka_offset >= %s and kafka_offset < %s",
                (pipeline.name, *where),
            )
            _ledger(conn, plan, r, "replay", counts[(r.topic, r.partition)])
        _publish_staged(conn, pipeline, plan, stage, target)
        _finish(conn, stage, plan)
        fault_point("in_commit")
    return COMMITTED, counts


def _already_committed(conn: psycopg.Connection, batch_id: str) -> bool:
    (done,) = conn.execute(
        "select exists (select 1 from eosflow.ledger where batch_id = %s) "
        "or exists (select 1 from eosflow.plans where batch_id = %s and status = 'committed')",
        (batch_id, batch_id),
    ).fetchone()
    return done
