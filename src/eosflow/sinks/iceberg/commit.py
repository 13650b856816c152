"""The run's one Iceberg commit: every range's data files and its new position, or nothing.

The driver loads the table, compares each planned range with the position the table holds (the same
decision as a Kafka sink's: the planned start means go on, the planned end set by this batch means
already committed, anything else FENCED), then adds the files and sets the positions in one Iceberg
transaction. The catalog swaps the table's metadata only if it is still the one loaded (and PyIceberg
does not retry: catalog.NO_RETRIES), so a run raced by another commit fails whole: FENCED, with
nothing of it visible.
"""

from __future__ import annotations

from collections.abc import Mapping

from eosflow.ledger.mirror import FENCED, RangeOutcome, SinkCommitted
from eosflow.ledger.positions import ALREADY_COMMITTED, COMMITTED, expected_position
from eosflow.ledger.ranges import PartitionPlan, Plan
from eosflow.sinks.iceberg import catalog as iceberg
from eosflow.sinks.iceberg.files import Written
from eosflow.sources.kafka.read import ReadOutsidePlanError

Key = tuple[str, int]


def commit(table, plan: Plan, written: Mapping[Key, Written]) -> dict[Key, RangeOutcome]:
    """Commit the plan's ranges into `table` (loaded by the caller); the outcome of each range."""
    from pyiceberg.exceptions import CommitFailedException

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
    if not going:
        return outcomes
    files = [f for p in going for f in written.get(_key(p), Written()).data_files]
    properties: dict[str, str] = {}
    for part in going:
        w = written.get(_key(part), Written())
        done = SinkCommitted(part.range.end, plan.batch_id, w.read, w.written, w.rejected)
        properties |= iceberg.position_property(_key(part), done, w.rejected_files)
    try:
        with table.transaction() as tx:
            if files:
                tx.add_files(files)
            tx.set_properties(properties)
    except CommitFailedException as exc:
        why = f"another commit changed {'.'.join(table.name())} since this run loaded it ({exc})"
        for part in going:
            w = written.get(_key(part), Written())
            outcomes[_key(part)] = RangeOutcome(
                *_key(part), FENCED, w.read, w.written, w.rejected, w.lo, w.hi, why
            )
        return outcomes
    for part in going:
        w = written.get(_key(part), Written())
        outcomes[_key(part)] = RangeOutcome(*_key(part), COMMITTED, w.read, w.written, w.rejected, w.lo, w.hi)
    return outcomes


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
    if w.read and (w.lo < r.start or w.hi >= r.end or w.read > r.span):
        raise ReadOutsidePlanError(
            f"batch {plan.batch_id}: read {w.read} records at offsets {w.lo}..{w.hi} of "
            f"{r.topic}[{r.partition}], planned {r}: nothing was committed"
        )


def _committing(plan: Plan) -> list[PartitionPlan]:
    return [p for p in plan.partitions if not p.range.empty or p.first_seen or p.lost is not None]


def _key(part: PartitionPlan) -> Key:
    return part.range.topic, part.range.partition
