"""`eosflow kafka transactions`: a Kafka sink's transactions left open, and aborting them.

librdkafka's admin API cannot list transactions (Kafka's ListTransactions and DescribeTransactions
are not in it), so an open transaction is found by what it does: it holds an output partition's
last stable offset (what read_committed readers get up to) below its high watermark. Aborting
needs no listing: `init_transactions` on each of the pipeline's fixed transactional ids aborts
whatever that id left open, exactly as the next run's tasks would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eosflow.sinks.kafka.output import output_of
from eosflow.sinks.kafka.produce import transactional_id
from eosflow.sinks.protocol import Pipeline

_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class HeldBack:
    """An output partition whose read_committed readers are held back by an open transaction."""

    topic: str
    partition: int
    stable: int  # the last stable offset: read_committed readers stop here
    high: int  # the high watermark: records written, committed or not

    def __str__(self) -> str:
        return (
            f"{self.topic}[{self.partition}]: read_committed readers stop at {self.stable:,}, "
            f"{self.high - self.stable:,} offsets written above it by a transaction still open"
        )


def held_back(kafka: Mapping[str, str], pipeline: Pipeline) -> list[HeldBack]:
    """The pipeline's output partitions with an open transaction in them."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    client = AdminClient(dict(kafka))
    sink = output_of(pipeline)
    topics = client.list_topics(timeout=_TIMEOUT_S).topics
    wanted = [
        TopicPartition(t, p)
        for t in (sink.output_topic, sink.dead_letter_topic)
        if t in topics
        for p in sorted(topics[t].partitions)
    ]
    if not wanted:
        return []

    def ends(level) -> dict[tuple[str, int], int]:
        futures = client.list_offsets(
            {tp: OffsetSpec.latest() for tp in wanted}, isolation_level=level, request_timeout=_TIMEOUT_S
        )
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    stable, high = ends(IsolationLevel.READ_COMMITTED), ends(IsolationLevel.READ_UNCOMMITTED)
    return [
        HeldBack(t, p, stable[(t, p)], high[(t, p)])
        for t, p in sorted(stable)
        if stable[(t, p)] < high[(t, p)]
    ]


def abort_open(kafka: Mapping[str, str], pipeline: Pipeline, log=print) -> list[str]:
    """Re-initialise every transactional id of the pipeline (one per source partition): each aborts
    the transaction its last holder left open and fences that holder. Returns the ids."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    topics = AdminClient(dict(kafka)).list_topics(timeout=_TIMEOUT_S).topics
    ids = [
        transactional_id(pipeline.name, t, p)
        for t in pipeline.topics
        if t in topics
        for p in sorted(topics[t].partitions)
    ]
    for tid in ids:
        producer = Producer({**kafka, "transactional.id": tid})
        producer.init_transactions(_TIMEOUT_S)
        producer.flush(0)
        log(f"re-initialised {tid}: whatever it left open is aborted, and its last holder is fenced")
    return ids
