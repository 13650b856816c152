"""A Kafka-sink pipeline's ledger: the warehouse's mirror of what Kafka committed.

For a Kafka sink the truth is Kafka: the consumer group `eosflow.<pipeline>`'s committed offsets,
written only inside the range transactions that produced the output (kafka_sink.py). The warehouse
ledger (plans, ledger rows, positions) mirrors every committed range afterwards, idempotently, so
planning, backfill validation, the views and dbt read one history for every sink. A run that died
between Kafka's commit and the mirror leaves the ledger one range behind: the next run mirrors it
from the committed offset's metadata (the batch id and its counts) before it plans.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import psycopg

from eosflow.ledger import store
from eosflow.ledger.positions import (
    ALREADY_COMMITTED,
    COMMITTED,
    FencedError,
    PartitionCounts,
    advance,
    expected_position,
    lock_positions,
)
from eosflow.ledger.ranges import PartitionPlan, Plan
from eosflow.pipelines import Pipeline
from eosflow.sinks.kafka.produce import ALREADY, FENCED, RangeOutcome, committed, group_id, parse_metadata

Key = tuple[str, int]
_TIMEOUT_S = 30.0


class LedgerBehindKafkaError(RuntimeError):
    """Kafka's committed offsets are ahead of the ledger, and no persisted plan explains it."""


def mirror(conn: psycopg.Connection, plan: Plan, outcomes: Mapping[Key, RangeOutcome]) -> tuple[str, dict]:
    """Record the ranges Kafka committed for this batch in the ledger; FencedError for any fenced one.

    One Postgres transaction, under the positions' locks, like a warehouse commit: a range already
    mirrored is left as it is, so a retry (or the next run's reconcile) may mirror it again safely.
    """
    done = {key: o for key, o in outcomes.items() if o.outcome != FENCED}
    counts = {key: PartitionCounts(o.read, o.written, o.rejected) for key, o in done.items()}
    with conn.transaction():
        locked = lock_positions(conn, plan)
        mirrored = _mirrored(conn, plan)
        parts = [p for p in plan.partitions if _key(p) in done and _to_mirror(p, locked, mirrored, plan)]
        advance(conn, dataclasses.replace(plan, partitions=tuple(parts)), counts)
        if all(_key(p) in mirrored or p in parts for p in _committing(plan)):
            conn.execute(
                "update eosflow.plans set status = 'committed', committed_at = coalesce(committed_at, now()) "
                "where batch_id = %s",
                (plan.batch_id,),
            )
    fresh = any(o.outcome != ALREADY for o in done.values())
    outcome = COMMITTED if fresh else ALREADY_COMMITTED
    fenced = [o.detail for o in outcomes.values() if o.outcome == FENCED]
    if fenced:
        raise FencedError(
            f"batch {plan.batch_id} is fenced in Kafka: another run committed these partitions since it was "
            f"planned ({'; '.join(fenced)}). Nothing of them was written (their transactions were never "
            "committed); the partitions listed are left to the run that holds them. Start a new run (new run "
            "id) to continue from the committed offsets."
        )
    return outcome, counts


def _key(part: PartitionPlan) -> Key:
    return part.range.topic, part.range.partition


def _committing(plan: Plan) -> list[PartitionPlan]:
    """The parts that make a transaction: a range with offsets, a first range, an acknowledged loss."""
    return [p for p in plan.partitions if not p.range.empty or p.first_seen or p.lost is not None]


def _mirrored(conn: psycopg.Connection, plan: Plan) -> set[Key]:
    rows = conn.execute(
        "select distinct topic, partition from eosflow.ledger where batch_id = %s", (plan.batch_id,)
    ).fetchall()
    return {(t, p) for t, p in rows}


def _to_mirror(part: PartitionPlan, locked, mirrored: set[Key], plan: Plan) -> bool:
    if _key(part) in mirrored:
        return False  # by an earlier attempt, or by reconcile
    position = locked[_key(part)].next_offset if _key(part) in locked else None
    if position == expected_position(part):
        return True
    raise LedgerBehindKafkaError(
        f"batch {plan.batch_id}: Kafka committed {part.range}, and the ledger's position for "
        f"{part.range.topic}[{part.range.partition}] is {position}: the ledger and the consumer group "
        f"{group_id(plan.pipeline)} disagree. Nothing was changed in the ledger; see docs/DESIGN.md, "
        "'Kafka sinks', for how to bring them together."
    )


def committed_offsets(kafka: Mapping[str, str], pipeline: str, topic: str, partitions: list[int]) -> dict:
    """partition -> (committed offset, metadata) of the pipeline's group; partitions without one left out."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **kafka,
            "group.id": group_id(pipeline),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        found = committed(consumer, [TopicPartition(topic, p) for p in partitions], _TIMEOUT_S)
    finally:
        consumer.close()
    return {tp.partition: (tp.offset, tp.metadata) for tp in found if tp.offset >= 0}


def reconcile(conn: psycopg.Connection, kafka: Mapping[str, str], pipeline: Pipeline, log=print) -> int:
    """Mirror what Kafka committed and the ledger does not show yet (a run that died after its Kafka
    commit); returns the ranges mirrored. LedgerBehindKafkaError if a plan cannot explain the gap."""
    mirrored = 0
    for topic in pipeline.topics:
        ledger = store.positions(conn, pipeline.name, topic)
        if not ledger:
            continue  # nothing planned yet: Kafka cannot be ahead of a plan that does not exist
        for partition, (offset, metadata) in committed_offsets(
            kafka, pipeline.name, topic, sorted(ledger)
        ).items():
            if ledger.get(partition) == offset:
                continue
            meta = parse_metadata(metadata)
            loaded = store.load_plan(conn, meta.get("batch", ""))
            part = _part(loaded[0], topic, partition) if loaded else None
            if part is None or part.range.end != offset or ledger.get(partition) != expected_position(part):
                raise LedgerBehindKafkaError(
                    f"pipeline {pipeline.name}: group {group_id(pipeline.name)} committed "
                    f"{topic}[{partition}] up to {offset} (batch {meta.get('batch', 'unknown')}), and the "
                    f"ledger's position is {ledger.get(partition)}, which no persisted plan explains. "
                    "Nothing was planned; see docs/DESIGN.md, 'Kafka sinks'."
                )
            outcome = RangeOutcome(
                topic,
                partition,
                ALREADY,
                meta.get("read", 0),
                meta.get("written", 0),
                meta.get("rejected", 0),
            )
            plan = loaded[0]
            mirror(conn, plan, {(topic, partition): outcome})
            log(
                f"mirrored {part.range} of batch {plan.batch_id}: Kafka committed it, and its run died "
                "before the ledger did"
            )
            mirrored += 1
    return mirrored


def _part(plan: Plan, topic: str, partition: int) -> PartitionPlan | None:
    return next((p for p in plan.partitions if _key(p) == (topic, partition)), None)
