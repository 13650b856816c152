"""The ledger's mirror of a sink whose truth lives outside the warehouse (Kafka, a table format, ...).

Such a sink commits each range where its output lives (for Kafka: the records and the consumer group's
offset in one Kafka transaction). The warehouse ledger (plans, ledger rows, positions) then mirrors every
committed range, idempotently, so planning, backfill validation, the views and dbt read one history for
every sink. A run that died between the sink's commit and the mirror leaves the ledger one range behind:
the next run mirrors it from what the sink says it committed (the batch id and its counts) before it
plans (`reconcile`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psycopg

from eosflow.ledger import store
from eosflow.ledger.positions import (
    ALREADY_COMMITTED,
    COMMITTED,
    FencedError,
    Locked,
    PartitionCounts,
    advance,
    expected_position,
    ledger_row,
    lock_positions,
)
from eosflow.ledger.ranges import PartitionPlan, Plan

Key = tuple[str, int]
Also = Callable[[psycopg.Connection, Plan, list[PartitionPlan]], None]
FENCED = "fenced"
TIMED_OUT = "timed out"  # the sink aborted the range's commit for its age: nothing of it is visible


class CommitTimedOutError(RuntimeError):
    """A range took longer to commit than the sink allows; it was aborted, nothing of it is visible."""


class LedgerBehindError(RuntimeError):
    """The sink committed further than the ledger shows, and no persisted plan explains it."""


@dataclass(frozen=True)
class RangeOutcome:
    """What one range's commit in the sink did: committed, already committed earlier, or fenced."""

    topic: str
    partition: int
    outcome: str  # COMMITTED, ALREADY_COMMITTED or FENCED
    read: int = 0
    written: int = 0
    rejected: int = 0
    lo: int | None = None  # lowest and highest offset read
    hi: int | None = None
    detail: str = ""

    @property
    def key(self) -> Key:
        return self.topic, self.partition


@dataclass(frozen=True)
class SinkReplayed:
    """The last replay a sink committed for one partition: its batch and counts."""

    batch_id: str
    read: int = 0
    written: int = 0
    rejected: int = 0


@dataclass(frozen=True)
class SinkCommitted:
    """What the sink says it committed for one partition: up to `offset`, by `batch_id`, with its counts;
    for a sink that replays, how many replays it committed and the last one."""

    offset: int
    batch_id: str | None
    read: int = 0
    written: int = 0
    rejected: int = 0
    replays: int = 0
    last_replay: SinkReplayed | None = None


def mirror(
    conn: psycopg.Connection,
    plan: Plan,
    outcomes: Mapping[Key, RangeOutcome],
    where: str,
    also: Also | None = None,
) -> tuple[str, dict[Key, PartitionCounts]]:
    """Record the ranges the sink committed for this batch in the ledger; FencedError for any fenced one.

    One Postgres transaction, under the positions' locks, like a warehouse commit: a range already
    mirrored is left as it is, so a retry (or the next run's reconcile) may mirror it again safely.
    `where` names the sink's truth in messages (e.g. "Kafka (consumer group eosflow.orders)").
    `also(conn, plan, parts)` writes what else the ledger keeps of the ranges being mirrored (a sink's
    rejected rows in eosflow.rejected), in the same transaction.
    """
    done, counts = _done(outcomes)
    with conn.transaction():
        locked = lock_positions(conn, plan)
        mirrored = _mirrored(conn, plan)
        parts = [
            p for p in plan.partitions if _key(p) in done and _to_mirror(p, locked, mirrored, plan, where)
        ]
        advance(conn, dataclasses.replace(plan, partitions=tuple(parts)), counts)
        if also is not None and parts:
            also(conn, plan, parts)
        if all(_key(p) in mirrored or p in parts for p in _committing(plan)):
            _plan_committed(conn, plan)
    # A plan with nothing to write (no new record anywhere) commits as it is, as a warehouse commit does.
    fresh = not outcomes or any(o.outcome != ALREADY_COMMITTED for o in done.values())
    outcome = COMMITTED if fresh else ALREADY_COMMITTED
    fenced = [o.detail for o in outcomes.values() if o.outcome == FENCED]
    if fenced:
        raise FencedError(
            f"batch {plan.batch_id} is fenced in {where}: another run committed these partitions since it "
            f"was planned ({'; '.join(fenced)}). Nothing of them was written (their transactions were never "
            "committed); the partitions listed are left to the run that holds them. Start a new run (new run "
            "id) to continue from the committed offsets."
        )
    timed_out = [o.detail for o in outcomes.values() if o.outcome == TIMED_OUT]
    if timed_out:
        raise CommitTimedOutError(
            f"batch {plan.batch_id}: {'; '.join(timed_out)}, so {where} aborted it: nothing of it is "
            "visible, and the same range would take as long again. Lower max_records_per_partition, or raise "
            "transaction_timeout_ms (within the brokers' transaction.max.timeout.ms), then run again"
        )
    return outcome, counts


def mirror_replay(
    conn: psycopg.Connection,
    plan: Plan,
    outcomes: Mapping[Key, RangeOutcome],
    where: str,
    also: Also | None = None,
) -> tuple[str, dict[Key, PartitionCounts]]:
    """Record a replay the sink committed: a `replay` ledger row per range and the partition's replay
    count, in one transaction under the positions' locks; positions stay. Idempotent like `mirror`
    (a range whose replay row is there is left as it is). `also` replaces the ranges' rejected rows.
    FencedError if the sink fenced the replay (another replay committed since it was planned)."""
    done, counts = _done(outcomes)
    with conn.transaction():
        lock_positions(conn, plan)
        mirrored = _mirrored(conn, plan)
        parts = [p for p in plan.partitions if _key(p) in done and _key(p) not in mirrored]
        for part in parts:
            ledger_row(conn, plan, part.range, "replay", counts[_key(part)])
            conn.execute(
                "update eosflow.positions set replays = replays + 1, updated_at = now() "
                "where pipeline = %s and topic = %s and partition = %s",
                (plan.pipeline, *_key(part)),
            )
        if also is not None and parts:
            also(conn, plan, parts)
        if all(_key(p) in mirrored or p in parts for p in plan.partitions):
            _plan_committed(conn, plan)
    fenced = [o.detail for o in outcomes.values() if o.outcome == FENCED]
    if fenced:
        raise FencedError(
            f"replay {plan.batch_id} is fenced in {where}: another replay of these partitions committed "
            f"since it was planned ({'; '.join(fenced)}). Nothing of it was written. Start a new run (new "
            "run id) if the range still needs replaying."
        )
    fresh = any(o.outcome != ALREADY_COMMITTED for o in done.values())
    return (COMMITTED if fresh else ALREADY_COMMITTED), counts


def reconcile(
    conn: psycopg.Connection,
    pipeline: str,
    topics: tuple[str, ...],
    committed: Callable[[str, list[int]], Mapping[int, SinkCommitted]],
    where: str,
    log: Callable[[str], None] = print,
    also: Also | None = None,
) -> int:
    """Mirror what the sink committed and the ledger does not show yet (a run that died after the sink's
    commit); returns the ranges mirrored. LedgerBehindError if no persisted plan explains the gap.

    committed(topic, partitions): what the sink committed for each of those partitions (none: left out).
    """
    mirrored = 0
    for topic in topics:
        ledger = store.positions(conn, pipeline, topic)
        if not ledger:
            continue  # nothing planned yet: the sink cannot be ahead of a plan that does not exist
        for partition, found in committed(topic, sorted(ledger)).items():
            if found.replays and found.replays > store.replays(conn, pipeline, topic, partition):
                mirrored += _reconcile_replay(conn, pipeline, topic, partition, found, where, log, also)
            if ledger.get(partition) == found.offset:
                continue
            loaded = store.load_plan(conn, found.batch_id or "")
            part = _part(loaded[0], topic, partition) if loaded else None
            if (
                part is None
                or part.range.end != found.offset
                or ledger.get(partition) != expected_position(part)
            ):
                raise LedgerBehindError(
                    f"pipeline {pipeline}: {where} committed {topic}[{partition}] up to {found.offset} "
                    f"(batch {found.batch_id or 'unknown'}), and the ledger's position is "
                    f"{ledger.get(partition)}, which no persisted plan explains. Nothing was planned; see "
                    "docs/DESIGN.md, 'The ledger behind a sink'."
                )
            assert loaded is not None  # part came from it
            outcome = RangeOutcome(
                topic, partition, ALREADY_COMMITTED, found.read, found.written, found.rejected
            )
            plan = loaded[0]
            mirror(conn, plan, {(topic, partition): outcome}, where, also)
            log(
                f"mirrored {part.range} of batch {plan.batch_id}: {where} committed it, and its run died "
                "before the ledger did"
            )
            mirrored += 1
    return mirrored


def _reconcile_replay(
    conn: psycopg.Connection,
    pipeline: str,
    topic: str,
    partition: int,
    found: SinkCommitted,
    where: str,
    log: Callable[[str], None],
    also: Also | None,
) -> int:
    """Mirror the replay the sink committed last and the ledger does not show (its run died between)."""
    ledger_replays = store.replays(conn, pipeline, topic, partition)
    replay = found.last_replay
    loaded = store.load_plan(conn, replay.batch_id) if replay is not None else None
    part = _part(loaded[0], topic, partition) if loaded else None
    if found.replays != ledger_replays + 1 or part is None or loaded is None or loaded[0].kind != "replay":
        raise LedgerBehindError(
            f"pipeline {pipeline}: {where} committed {found.replays} replay(s) of {topic}[{partition}] "
            f"(the last by batch {replay.batch_id if replay else 'unknown'}), the ledger shows "
            f"{ledger_replays}, which no persisted replay plan explains. Nothing was planned; see "
            "docs/DESIGN.md, 'The ledger behind a sink'."
        )
    assert replay is not None  # part came from its plan
    outcome = RangeOutcome(topic, partition, ALREADY_COMMITTED, replay.read, replay.written, replay.rejected)
    mirror_replay(conn, loaded[0], {(topic, partition): outcome}, where, also)
    log(
        f"mirrored the replay of {part.range} by batch {replay.batch_id}: {where} committed it, and its run "
        "died before the ledger did"
    )
    return 1


def _done(outcomes: Mapping[Key, RangeOutcome]) -> tuple[dict[Key, RangeOutcome], dict[Key, PartitionCounts]]:
    """The ranges the sink committed (now or earlier), and their counts."""
    done = {key: o for key, o in outcomes.items() if o.outcome not in (FENCED, TIMED_OUT)}
    return done, {key: PartitionCounts(o.read, o.written, o.rejected) for key, o in done.items()}


def _plan_committed(conn: psycopg.Connection, plan: Plan) -> None:
    conn.execute(
        "update eosflow.plans set status = 'committed', committed_at = coalesce(committed_at, now()) "
        "where batch_id = %s",
        (plan.batch_id,),
    )


def _key(part: PartitionPlan) -> Key:
    return part.range.topic, part.range.partition


def _committing(plan: Plan) -> list[PartitionPlan]:
    """The parts that make a commit: a range with offsets, a first range, an acknowledged loss."""
    return [p for p in plan.partitions if not p.range.empty or p.first_seen or p.lost is not None]


def _mirrored(conn: psycopg.Connection, plan: Plan) -> set[Key]:
    rows = conn.execute(
        "select distinct topic, partition from eosflow.ledger where batch_id = %s", (plan.batch_id,)
    ).fetchall()
    return {(t, p) for t, p in rows}


def _to_mirror(
    part: PartitionPlan, locked: Mapping[Key, Locked], mirrored: set[Key], plan: Plan, where: str
) -> bool:
    if _key(part) in mirrored:
        return False  # by an earlier attempt, or by reconcile
    position = locked[_key(part)].next_offset if _key(part) in locked else None
    if position == expected_position(part):
        return True
    raise LedgerBehindError(
        f"batch {plan.batch_id}: {where} committed {part.range}, and the ledger's position for "
        f"{part.range.topic}[{part.range.partition}] is {position}: the ledger and the sink disagree. "
        "Nothing was changed in the ledger; see docs/DESIGN.md, 'The ledger behind a sink', for how to "
        "bring them together."
    )


def _part(plan: Plan, topic: str, partition: int) -> PartitionPlan | None:
    return next((p for p in plan.partitions if _key(p) == (topic, partition)), None)
