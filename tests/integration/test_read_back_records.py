"""Reading a few records back by their coordinates (eosflow.sources.kafka.read_back.records_at), against
the real broker: what the Iceberg state sink quotes for a change it rejects at commit."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from eosflow.kafka_admin import ensure_topic
from eosflow.sources.kafka.read_back import records_at

pytestmark = pytest.mark.integration


def test_records_at_returns_each_coordinates_key_and_value_and_leaves_out_what_holds_none(
    running_stack, topic_name
):
    """About 2 s. Offsets close together are read on, far apart sought (a gap of 3 here); one past the
    partition's end, and one of a transaction's commit marker, hold no record."""
    kafka = running_stack.kafka
    ensure_topic(running_stack.bootstrap_servers, topic_name, 1, log=lambda m: None)
    plain = Producer({"bootstrap.servers": running_stack.bootstrap_servers})
    for i in range(20):
        plain.produce(topic_name, key=f"k{i}".encode(), value=None if i == 7 else f"v{i}".encode())
    assert plain.flush(30) == 0
    txn = Producer({"bootstrap.servers": running_stack.bootstrap_servers, "transactional.id": topic_name})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic_name, key=b"t", value=b"in a transaction")  # offset 20, its marker at 21
    txn.commit_transaction(30)
    wanted = [(topic_name, 0, o) for o in (1, 2, 4, 7, 15, 20, 21, 40)]
    found = records_at(kafka, wanted, seek_gap=3)
    assert found == {
        (topic_name, 0, 1): (b"k1", b"v1"),
        (topic_name, 0, 2): (b"k2", b"v2"),
        (topic_name, 0, 4): (b"k4", b"v4"),
        (topic_name, 0, 7): (b"k7", None),
        (topic_name, 0, 15): (b"k15", b"v15"),
        (topic_name, 0, 20): (b"t", b"in a transaction"),
    }
