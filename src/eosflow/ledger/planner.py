"""The pure planner: stored positions + what Kafka has -> the ranges one run reads.

No I/O here; kafka_offsets.py asks Kafka and store.py asks the warehouse. That keeps every rule
of the contract's step 1 testable without a broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eosflow.ledger.ranges import OffsetRange, PartitionPlan


@dataclass(frozen=True)
class PartitionOffsets:
    """What Kafka says about one partition, under read_committed."""

    log_start: int  # the earliest offset still in the log
    stable_end: int  # the last stable offset: nothing at or after it is committed yet
    initial: int | None = None  # where the initial policy would start a never-seen partition


class DataLossError(RuntimeError):
    """Records were deleted from Kafka before the pipeline read them."""

    def __init__(self, pipeline: str, missing: list[OffsetRange]) -> None:
        self.missing = missing
        listed = "; ".join(f"{r} ({r.span:,} offsets)" for r in missing)
        super().__init__(
            f"data loss in pipeline {pipeline!r}: Kafka deleted records before they were read: {listed}. "
            "They cannot be recovered from Kafka. If the loss is accepted, re-run with "
            "--acknowledge-data-loss: the gap is then written to the ledger as a 'lost' range and "
            "ingestion continues from the log start."
        )


class PositionBeyondLogError(RuntimeError):
    """A stored position lies past the end of the log: truncated, or the topic was recreated."""


class TopicRecreatedError(RuntimeError):
    """The topic a pipeline's positions count in was deleted and re-created under the same name."""

    def __init__(self, pipeline: str, topic: str, stored: str, current: str) -> None:
        self.stored, self.current = stored, current
        super().__init__(
            f"pipeline {pipeline!r}: topic {topic!r} was deleted and re-created: its stored positions count "
            f"in topic id {stored}, but the topic now has id {current}, whose offsets hold other records. "
            "Nothing was written. The pipeline's table stays the complete history of the old topic; to "
            "ingest the new one, declare a new pipeline (new name and target_table) for it "
            "(docs/DESIGN.md, 'Topic identity')."
        )


def check_topic_identity(
    pipeline: str, topic: str, current: str | None, stored: Mapping[int, str | None]
) -> None:
    """Refuse when a partition's position was committed against another incarnation of the topic."""
    if current is None:
        return
    for partition in sorted(stored):
        if stored[partition] is not None and stored[partition] != current:
            raise TopicRecreatedError(pipeline, topic, str(stored[partition]), current)


def plan_partitions(
    pipeline: str,
    topic: str,
    kafka: Mapping[int, PartitionOffsets],
    positions: Mapping[int, int | None],
    max_records: int,
    acknowledge_data_loss: bool = False,
    topic_id: str | None = None,
    stored_topic_ids: Mapping[int, str | None] | None = None,
) -> list[PartitionPlan]:
    """One PartitionPlan per partition Kafka has (idle and newly added ones too), in partition order.

    positions[p] is the stored next offset, or None / absent for a partition never committed.
    topic_id is Kafka's id of the topic now; stored_topic_ids[p] the one p's position counts in.
    """
    if max_records < 1:
        raise ValueError(f"max records per partition must be at least 1, not {max_records}")
    check_topic_identity(pipeline, topic, topic_id, stored_topic_ids or {})
    plans: list[PartitionPlan] = []
    lost: list[OffsetRange] = []
    for partition in sorted(kafka):
        offs = kafka[partition]
        stored = positions.get(partition)
        first_seen = stored is None
        if stored is None:
            # Never seen: the initial policy decides. earliest, latest and timestamps resolve inside
            # the log; only an explicit offset can point below the log start, and that is data loss
            # (records the pipeline was declared to read are gone), not something to round up.
            start = offs.log_start if offs.initial is None else min(offs.initial, offs.stable_end)
        else:
            start = stored
            if start > offs.stable_end:
                raise PositionBeyondLogError(
                    f"pipeline {pipeline!r}: stored position {start} of {topic}[{partition}] is beyond the "
                    f"log end {offs.stable_end}: the log was truncated (an unclean leader election) or the "
                    "topic deleted and recreated. Nothing was written. Positions cannot be trusted; "
                    "investigate before resetting them (docs/DESIGN.md, 'Topic identity')."
                )
        gap = OffsetRange(topic, partition, start, offs.log_start) if start < offs.log_start else None
        if gap is not None:
            lost.append(gap)
            start = offs.log_start
        end = min(offs.stable_end, start + max_records)
        plans.append(
            PartitionPlan(
                OffsetRange(topic, partition, start, end),
                first_seen,
                gap,
                lag_after=offs.stable_end - end,
                topic_id=topic_id,
            )
        )
    if lost and not acknowledge_data_loss:
        raise DataLossError(pipeline, lost)
    return plans
