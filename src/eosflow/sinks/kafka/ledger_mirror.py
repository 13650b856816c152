"""A Kafka-sink pipeline's ledger: the warehouse's mirror of what Kafka committed (eosflow.ledger.mirror).

For a Kafka sink the truth is Kafka: the consumer group `eosflow.<pipeline>`'s committed offsets,
written only inside the range transactions that produced the output (produce.py), each with the batch
id and its counts as the offset's metadata. This module reads them for the ledger's mirror.
"""

from __future__ import annotations

from collections.abc import Mapping

import psycopg

from eosflow.ledger import mirror as ledger_mirror
from eosflow.ledger.mirror import RangeOutcome, SinkCommitted
from eosflow.ledger.ranges import Plan
from eosflow.sinks.kafka.produce import committed, group_id, parse_metadata
from eosflow.sinks.protocol import Pipeline

Key = tuple[str, int]
_TIMEOUT_S = 30.0


def where(pipeline: str) -> str:
    return f"Kafka (consumer group {group_id(pipeline)})"


def mirror(conn: psycopg.Connection, plan: Plan, outcomes: Mapping[Key, RangeOutcome]) -> tuple[str, dict]:
    """The ranges this batch's transactions committed in Kafka, into the ledger."""
    return ledger_mirror.mirror(conn, plan, outcomes, where(plan.pipeline))


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
    commit); returns the ranges mirrored."""

    def in_kafka(topic: str, partitions: list[int]) -> dict[int, SinkCommitted]:
        found = {}
        for partition, (offset, metadata) in committed_offsets(
            kafka, pipeline.name, topic, partitions
        ).items():
            meta = parse_metadata(metadata)
            found[partition] = SinkCommitted(
                offset,
                meta.get("batch"),
                meta.get("read", 0),
                meta.get("written", 0),
                meta.get("rejected", 0),
            )
        return found

    return ledger_mirror.reconcile(conn, pipeline.name, pipeline.topics, in_kafka, where(pipeline.name), log)
