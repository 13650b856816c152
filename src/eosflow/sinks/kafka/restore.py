"""Restore a change stream's output partition: each key's last record, read_committed from the start.

A range's transaction does it after fencing its transactional id and before producing (produce.py), as
a Kafka Streams state store is restored from its changelog topic: compaction bounds what is read. Only
this pipeline's transactions write the partition (one per source partition of the same number), and
init_transactions just aborted whatever the id left open, so reading to the end read_committed sees
every record a read_committed reader ever will.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from eosflow.sinks.kafka.state import PartitionState
from eosflow.sources.kafka.read_back import ReadBackIncompleteError

_IDLE_S = 30.0


def restore(kafka: Mapping[str, str], topic: str, partition: int, state: PartitionState) -> tuple[int, float]:
    """Fill `state` with the partition's last record per key; returns (records read, seconds)."""
    began = time.monotonic()
    read = state.restore(_records(kafka, topic, partition))
    return read, time.monotonic() - began


def _records(kafka: Mapping[str, str], topic: str, partition: int) -> Iterator[tuple]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **kafka,
            "group.id": "eosflow.restore",  # never commits: assign() and no offsets stored
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=_IDLE_S)
        if high <= low:
            return
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < _IDLE_S:
            batch = consumer.consume(10_000, timeout=0.2)
            for m in batch:
                error = m.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return
                    continue
                yield m.key(), m.value(), m.headers  # read when asked: state.PartitionState.held
            if batch:
                idle_since = time.monotonic()
        raise ReadBackIncompleteError(
            f"restoring {topic}[{partition}] stopped short of its end: no record and no end-of-partition "
            f"for {_IDLE_S:g} s (a broker paused, or the partition's leader is unavailable); nothing was "
            "produced. Retry when Kafka answers"
        )
    finally:
        consumer.close()
