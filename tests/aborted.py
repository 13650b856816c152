"""A topic of order events in small Kafka transactions, some of them aborted: what a reader must skip."""

from __future__ import annotations

from eosflow.kafka_admin import ensure_topic
from eosflow_dev.produce import events
from eosflow_dev.produce.manifest import Manifest
from eosflow_dev.produce.producer import Delivery, EventProducer, produce_stream


def produce_with_aborts(bootstrap: str, topic: str, partitions: int, count: int, seed: int) -> Manifest:
    """`count` events in transactions of 40, about 30% of them aborted; the manifest says which."""
    ensure_topic(bootstrap, topic, partitions, log=lambda m: None)
    delivery = Delivery(transactional_id=f"{topic}-tx", txn_size=40, abort_ratio=0.3)
    producer = EventProducer(bootstrap, topic, delivery, seed=seed)
    manifest = produce_stream(producer, events.generate(seed, count), seed=seed)
    assert manifest.counts()["aborted"] > 0
    return manifest
