"""The positions and ledger rows every sink's commit moves: locked in partition order, fenced, advanced.

A warehouse commit does all of this inside its own Postgres transaction (sinks/postgres/commit.py); a
sink whose truth lives elsewhere mirrors what it committed through the same steps (ledger/mirror.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psycopg

from eosflow.ledger.planner import TopicRecreatedError
from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
from eosflow.rows import one_row

COMMITTED = "committed"


ALREADY_COMMITTED = "already committed"


class FencedError(RuntimeError):
    """Another run moved a position this plan starts from; nothing was written."""


@dataclass(frozen=True)
class PartitionCounts:
    read: int  # records Spark read in the planned range
    written: int = 0  # output rows committed
    rejected: int = 0  # rejected rows committed


Key = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class Locked:
    """A partition's position row, as the commit sees it under lock."""

    next_offset: int | None
    topic_id: str | None
    replays: int


def advance(conn: psycopg.Connection, plan: Plan, counts: Mapping[Key, PartitionCounts]) -> None:
    """One ledger row per range (and per acknowledged loss), and the positions moved to the ends."""
    for part in plan.partitions:
        r, key = part.range, (part.range.topic, part.range.partition)
        if part.lost is not None:
            ledger_row(conn, plan, part.lost, "lost", PartitionCounts(0))
        if not r.empty or part.first_seen:
            # An empty first range still goes in: it fixes where the partition's history starts.
            ledger_row(conn, plan, r, "data", counts[key])
        if not r.empty or part.first_seen or part.lost is not None:
            # A loss that emptied the partition moves the position too, to the end of the lost range.
            conn.execute(
                "update eosflow.positions set next_offset = %s, topic_id = coalesce(%s, topic_id), "
                "updated_at = now() where pipeline = %s and topic = %s and partition = %s",
                (r.end, part.topic_id, plan.pipeline, r.topic, r.partition),
            )


def lock_positions(conn: psycopg.Connection, plan: Plan) -> dict[Key, Locked]:
    # Partition order everywhere, so two commits of one pipeline can never deadlock.
    rows = conn.execute(
        "select topic, partition, next_offset, topic_id, replays from eosflow.positions "
        "where pipeline = %s and (topic, partition) in (select * from unnest(%s::text[], %s::int[])) "
        "order by topic, partition for update",
        (plan.pipeline, [r.topic for r in plan.ranges], [r.partition for r in plan.ranges]),
    ).fetchall()
    return {(topic, partition): Locked(offset, tid, n) for topic, partition, offset, tid, n in rows}


def check_topic_identity(plan: Plan, locked: Mapping[Key, Locked]) -> None:
    for part in plan.partitions:
        stored = locked.get((part.range.topic, part.range.partition))
        if stored and stored.topic_id and part.topic_id and stored.topic_id != part.topic_id:
            raise TopicRecreatedError(plan.pipeline, part.range.topic, stored.topic_id, part.topic_id)


def expected_position(part: PartitionPlan) -> int | None:
    """Where the stored position must be for this part to commit: its start, or none at all.

    Only a partition's first range commits onto no position, and the planner makes a first range
    start where the partition's history may start (the log start or the initial policy), never in
    the middle of a catch-up.
    """
    if part.first_seen:
        return None
    return part.lost.start if part.lost else part.range.start


def check_fencing(plan: Plan, locked: Mapping[Key, Locked]) -> None:
    check_topic_identity(plan, locked)
    moved = []
    for part in plan.partitions:
        key = (part.range.topic, part.range.partition)
        expected = expected_position(part)
        if key not in locked or locked[key].next_offset != expected:
            found = locked[key].next_offset if key in locked else "no position row"
            moved.append(
                f"{part.range.topic}[{part.range.partition}] planned from {expected}, position is now {found}"
            )
    if moved:
        raise FencedError(
            f"batch {plan.batch_id} is fenced: another run committed these partitions since it was planned "
            f"({'; '.join(moved)}). Nothing was written. This is the protection against zombies and "
            "concurrent runs working; start a new run (new run id) to continue from the stored positions."
        )


def ledger_row(conn: psycopg.Connection, plan: Plan, r: OffsetRange, kind: str, c: PartitionCounts) -> None:
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


def already_committed(conn: psycopg.Connection, batch_id: str) -> bool:
    done: bool
    (done,) = one_row(
        conn.execute(
            "select exists (select 1 from eosflow.ledger where batch_id = %s) "
            "or exists (select 1 from eosflow.plans where batch_id = %s and status = 'committed')",
            (batch_id, batch_id),
        )
    )
    return done


class StagingIncompleteError(RuntimeError):
    """The staged rows do not add up to what was read; nothing was written."""


class ReplayCountError(RuntimeError):
    """A replay re-read another number of records than is committed for its range; nothing was written."""


class ReplayOutsideCommittedError(RuntimeError):
    """A replay may only re-read offsets that are committed."""
