"""The run's one Iceberg commit: every range's data files and its new position, or nothing.

The driver loads the table, compares each planned range with the position the table holds (the same
decision as a Kafka sink's: the planned start means go on, the planned end set by this batch means
already committed, anything else FENCED), then adds the files and sets the positions in one Iceberg
transaction. Every such transaction makes a snapshot (an empty append when no file is added) and so
asserts that the table's `main` is still the snapshot the run loaded: every catalog, the SQL one included,
applies a commit's updates to the table's current metadata if its requirements hold, and no requirement
asserts properties; PyIceberg does not retry (catalog.NO_RETRIES). So a run raced by another commit fails
whole, on any catalog: FENCED, with nothing of it visible. A replay (commit_replay)
is the same one transaction: its ranges' rows deleted
(PyIceberg rewrites the files they share with other rows), the re-read files added, the replay counted.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

from eosflow.ledger.mirror import FENCED, RangeOutcome, SinkCommitted, SinkReplayed
from eosflow.ledger.positions import (
    ALREADY_COMMITTED,
    COMMITTED,
    ReplayCountError,
    ReplayOutsideCommittedError,
    expected_position,
)
from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
from eosflow.sinks.iceberg import catalog as iceberg
from eosflow.sinks.iceberg.files import Written
from eosflow.sources.kafka.read import ReadOutsidePlanError

Key = tuple[str, int]


def commit(table, plan: Plan, written: Mapping[Key, Written]) -> dict[Key, RangeOutcome]:
    """Commit the plan's ranges into `table` (loaded by the caller); the outcome of each range."""
    outcomes, going, properties = deciding(table, plan, written)
    if not going:
        return outcomes
    files = [f for p in going for f in written.get(_key(p), Written()).data_files]
    return outcomes | _transaction(table, plan, going, written, files, properties)


def deciding(
    table, plan: Plan, written: Mapping[Key, Written]
) -> tuple[dict[Key, RangeOutcome], list[PartitionPlan], dict[str, str]]:
    """Each planned range against the position the table holds: the outcomes of those that stop here
    (already committed, FENCED), the ranges that go on, and their new position properties."""
    if table.properties.get("commit.retry.num-retries") != "0":
        raise RuntimeError(
            f"Iceberg table {'.'.join(table.name())}: commit.retry.num-retries is not 0, so a concurrent "
            "commit would be retried instead of fenced; the next run sets it back (nothing was committed)"
        )
    held = iceberg.positions(table)
    outcomes: dict[Key, RangeOutcome] = {}
    going: list[PartitionPlan] = []
    for part in _committing(plan):
        key = (part.range.topic, part.range.partition)
        w = written.get(key, Written())
        _check_within(plan, part, w)
        outcome, why = decide(part, plan.batch_id, held.get(key))
        if outcome is None:
            going.append(part)
        else:
            outcomes[key] = RangeOutcome(*key, outcome, w.read, w.written, w.rejected, w.lo, w.hi, why)
    return outcomes, going, position_properties(table, plan, going, written)


def position_properties(
    table, plan: Plan, going: list[PartitionPlan], written: Mapping[Key, Written]
) -> dict[str, str]:
    """The position properties the ranges that go on commit: each one's end, batch, counts and rejected
    rows' files."""
    bodies = iceberg.position_bodies(table)
    properties: dict[str, str] = {}
    for part in going:
        w = written.get(_key(part), Written())
        done = SinkCommitted(part.range.end, plan.batch_id, w.read, w.written, w.rejected)
        body = iceberg.committed_body(bodies.get(_key(part)), done, w.rejected_files)
        properties |= iceberg.position_property(_key(part), body)
    return properties


def commit_replay(
    table, plan: Plan, written: Mapping[Key, Written], committed_in: Callable[[OffsetRange], int]
) -> dict[Key, RangeOutcome]:
    """Replace the rows of already committed ranges with their re-read versions, in one Iceberg commit
    (the ranges' rows deleted, the new files added, each partition's replay count raised); positions
    stay. Fenced if another replay of a partition committed since this one was planned; refused
    (nothing written) if a range reaches past the committed position, or if the re-read holds other
    than the `committed_in(range)` records committed there (rows and rejected rows)."""
    held = iceberg.positions(table)
    outcomes: dict[Key, RangeOutcome] = {}
    going: list[PartitionPlan] = []
    for part in plan.partitions:
        r, key = part.range, _key(part)
        w = written.get(key, Written())
        _check_within(plan, part, w)
        found = held.get(key)
        if (
            found is not None
            and found.last_replay is not None
            and found.last_replay.batch_id == plan.batch_id
        ):
            why = f"{r} was replayed by this batch earlier"
            outcomes[key] = RangeOutcome(
                *key, ALREADY_COMMITTED, w.read, w.written, w.rejected, w.lo, w.hi, why
            )
        elif found is None or found.offset < r.end:
            raise ReplayOutsideCommittedError(
                f"replay {plan.batch_id}: {r} reaches past the committed position "
                f"({'none' if found is None else found.offset}); nothing was written. Replay only committed "
                "offsets, or catch up first."
            )
        elif part.replays is not None and found.replays != part.replays:
            why = f"{r.topic}[{r.partition}] planned after {part.replays} replay(s), the table holds "
            why += str(found.replays)
            outcomes[key] = RangeOutcome(*key, FENCED, w.read, w.written, w.rejected, w.lo, w.hi, why)
        else:
            going.append(part)
    if not going or any(o.outcome == FENCED for o in outcomes.values()):
        return outcomes
    wrong = [
        f"{p.range}: re-read {written.get(_key(p), Written()).read:,} records, {committed_in(p.range):,} are "
        "committed"
        for p in going
        if written.get(_key(p), Written()).read != committed_in(p.range)
    ]
    if wrong:
        raise ReplayCountError(
            f"replay {plan.batch_id} refused: {'; '.join(wrong)}. Nothing was written: replacing the rows "
            "would lose or invent records. Kafka no longer holds the committed records of the range as "
            "they were (a compacted topic, or records deleted); replay a range Kafka still holds whole."
        )
    bodies = iceberg.position_bodies(table)
    properties: dict[str, str] = {}
    for part in going:
        w = written.get(_key(part), Written())
        replay = SinkReplayed(plan.batch_id, w.read, w.written, w.rejected)
        body = iceberg.replayed_body(bodies[_key(part)], replay, w.rejected_files)
        properties |= iceberg.position_property(_key(part), body)
    files = [f for p in going for f in written.get(_key(p), Written()).data_files]
    deleted = [in_range(p.range) for p in going]
    return outcomes | _transaction(table, plan, going, written, files, properties, deleted)


def in_range(r: OffsetRange):
    """The rows of a range, as an Iceberg filter."""
    from pyiceberg.expressions import And

    from eosflow.sinks.iceberg.predicates import equal_to, greater_than_or_equal, less_than

    return And(
        equal_to("kafka_topic", r.topic),
        equal_to("kafka_partition", r.partition),
        greater_than_or_equal("kafka_offset", r.start),
        less_than("kafka_offset", r.end),
    )


def _transaction(
    table,
    plan: Plan,
    going: list[PartitionPlan],
    written: Mapping[Key, Written],
    files,
    properties,
    deleted=(),
    appended=None,
) -> dict[Key, RangeOutcome]:
    """One Iceberg transaction: rows deleted, files (or an Arrow table of rows) added, positions set;
    FENCED if the table changed."""
    from pyiceberg.exceptions import CommitFailedException

    summary = {"eosflow.batch-id": plan.batch_id, "eosflow.pipeline": plan.pipeline}
    try:
        with table.transaction() as tx:
            for where in deleted:
                with warnings.catch_warnings():  # a filter matching no row deletes nothing: as meant
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    tx.delete(where, snapshot_properties=summary)
            if files:
                tx.add_files(files, snapshot_properties=summary)
            if appended is not None and appended.num_rows:
                tx.append(appended, snapshot_properties=summary)
            if not files and (appended is None or not appended.num_rows):
                # No file to add (and a delete that matched no row makes no snapshot): an empty append
                # still moves `main`, so the commit asserts the snapshot it started from, as a REST
                # catalog checks it, and a race with it is fenced.
                with tx.update_snapshot(snapshot_properties=summary).fast_append():
                    pass
            tx.set_properties(properties)
    except CommitFailedException as exc:
        why = f"another commit changed {'.'.join(table.name())} since this run loaded it ({exc})"
        outcome, detail = FENCED, why
    else:
        outcome, detail = COMMITTED, ""
    out = {}
    for part in going:
        w = written.get(_key(part), Written())
        out[_key(part)] = RangeOutcome(
            *_key(part), outcome, w.read, w.written, w.rejected, w.lo, w.hi, detail
        )
    return out


def decide(part: PartitionPlan, batch_id: str, held: SinkCommitted | None) -> tuple[str | None, str]:
    """(None, "") to go on, or (ALREADY_COMMITTED or FENCED, why)."""
    r = part.range
    if held is not None and held.offset == r.end and held.batch_id == batch_id:
        return ALREADY_COMMITTED, f"{r} was committed by this batch earlier"
    expected = expected_position(part)
    found = None if held is None else held.offset
    if found == expected:
        return None, ""
    planned = "no position" if expected is None else f"position {expected}"
    has = "none" if held is None else f"{held.offset} (batch {held.batch_id})"
    return FENCED, f"{r.topic}[{r.partition}] planned from {planned}, the table holds {has}"


def _check_within(plan: Plan, part: PartitionPlan, w: Written) -> None:
    r = part.range
    if not w.read:
        return
    assert w.lo is not None and w.hi is not None  # set with the first records read
    if w.lo < r.start or w.hi >= r.end or w.read > r.span:
        raise ReadOutsidePlanError(
            f"batch {plan.batch_id}: read {w.read} records at offsets {w.lo}..{w.hi} of "
            f"{r.topic}[{r.partition}], planned {r}: nothing was committed"
        )


def _committing(plan: Plan) -> list[PartitionPlan]:
    return [p for p in plan.partitions if not p.range.empty or p.first_seen or p.lost is not None]


def _key(part: PartitionPlan) -> Key:
    return part.range.topic, part.range.partition
