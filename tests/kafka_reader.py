"""Read a topic back as a downstream consumer would, and the source records its headers name."""

from __future__ import annotations

from collections import Counter

from confluent_kafka import Consumer, KafkaError, TopicPartition


def read_all(settings, topic: str, isolation: str = "read_committed") -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": "test.reader",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])
        records, open_ = [], set(partitions)
        while open_:
            batch = consumer.consume(1000, timeout=5)
            if not batch:
                break
            for m in batch:
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        open_.discard(m.partition())
                    continue
                records.append(m)
        return records
    finally:
        consumer.close()


def sources(records) -> Counter:
    return Counter(
        (
            h["eosflow-source-topic"].decode(),
            int(h["eosflow-source-partition"]),
            int(h["eosflow-source-offset"]),
        )
        for h in (dict(m.headers()) for m in records)
    )
