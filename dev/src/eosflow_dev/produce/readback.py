"""Read a whole topic back with a plain consumer, as read_committed or read_uncommitted.

Used to check the producer's claims (tests, the demo) independently of Spark and the warehouse.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from eosflow.kafka_admin import partition_count


@dataclass(frozen=True, slots=True)
class ReadRecord:
    partition: int
    offset: int
    event_id: str | None


def read_topic(
    bootstrap: str, topic: str, isolation: str = "read_committed", timeout_s: float = 60.0
) -> list[ReadRecord]:
    """Every record from the log start to the end visible under `isolation`, in partition order."""
    partitions = partition_count(bootstrap, topic)
    if partitions is None:
        raise LookupError(f"topic {topic!r} does not exist")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eosflow-readback-{time.time_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,  # the log's end comes as EOF events: a short wait reaches them sooner
        }
    )
    out: list[ReadRecord] = []
    try:
        # Offset -2 is "beginning"; EOF under read_committed arrives at the last stable offset.
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        pending = set(range(partitions))
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach the end of partitions {sorted(pending)}")
            # consume waits its whole timeout unless 10,000 records come: keep it short, the loop goes on
            for msg in consumer.consume(num_messages=10_000, timeout=0.1):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise RuntimeError(f"consumer error on {topic}: {err.str()}")
                out.append(ReadRecord(msg.partition(), msg.offset(), _event_id(msg.value())))
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))


def _event_id(value: bytes | None) -> str | None:
    try:
        return json.loads(value)["event_id"]
    except (TypeError, ValueError, KeyError):
        return None
