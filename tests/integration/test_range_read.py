"""eosflow's own range reader (librdkafka in the task) against the real broker: exactly the committed
records of a range, its holes (aborted records, transaction markers) skipped, its end respected, and
deleted records a failure, never a jump."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from eosflow.kafka_admin import ensure_topic
from eosflow.pipelines import InitialOffset
from eosflow.sources.kafka.offsets import partition_offsets
from eosflow.sources.kafka.range_read import RECORD_SCHEMA, RangeToRead, ReadDataLossError, read_range
from tests.aborted import produce_with_aborts

pytestmark = pytest.mark.integration


def _read(bootstrap: str, topic: str, partition: int, start: int, end: int, **kw) -> list[dict]:
    r = RangeToRead(topic, partition, start, end, "b1")
    batches = list(read_range({"bootstrap.servers": bootstrap}, r, **kw))
    assert all(b.schema == RECORD_SCHEMA for b in batches)
    return [row for b in batches for row in b.to_pylist()]


def test_a_range_holds_exactly_its_committed_records_and_ends_where_planned(running_stack, topic_name):
    s = running_stack
    manifest = produce_with_aborts(s.bootstrap_servers, topic_name, 2, 1_000, seed=5)
    visible = sorted((r.partition, r.offset, r.event_id) for r in manifest.visible())
    ends = partition_offsets(s.bootstrap_servers, topic_name, InitialOffset("earliest", None))

    whole = []
    for p, offsets in ends.items():
        rows = _read(s.bootstrap_servers, topic_name, p, 0, offsets.stable_end, batch_records=97)
        assert [r["offset"] for r in rows] == sorted(r["offset"] for r in rows)  # in offset order
        whole += [(p, r["offset"], json.loads(r["value"])["event_id"]) for r in rows]
    assert whole == visible

    # Ranges cut anywhere, an aborted transaction's records or a marker included: each holds exactly
    # the committed records inside it, and together they hold each once.
    p, end = 0, ends[0].stable_end
    cuts = [0, 1, 37, 40, 41, 83, 200, end - 1, end]
    pieces = [
        (r["offset"], json.loads(r["value"])["event_id"])
        for a, b in zip(cuts, cuts[1:], strict=False)
        for r in _read(s.bootstrap_servers, topic_name, p, a, b)
        if a <= r["offset"] < b
    ]
    assert pieces == [(o, e) for q, o, e in visible if q == p]
    for a, b in zip(cuts, cuts[1:], strict=False):
        assert all(a <= r["offset"] < b for r in _read(s.bootstrap_servers, topic_name, p, a, b))


def test_a_record_keeps_its_key_value_headers_and_kafka_timestamp(running_stack, topic_name):
    s = running_stack
    ensure_topic(s.bootstrap_servers, topic_name, 1, log=lambda m: None)
    producer = Producer({"bootstrap.servers": s.bootstrap_servers, "enable.idempotence": True})
    headers = [("h", b"v1"), ("h", b"v2"), ("empty", None), ("bad", b"\xff\xfeok"), ("q", b'"\\\n\x00')]
    producer.produce(topic_name, key=b"\x00\x01k", value=b"{}", headers=headers, timestamp=1_700_000_000_123)
    producer.produce(topic_name, value=None, timestamp=-30_610_224_000_000)  # no key, a tombstone
    producer.flush(10)

    first, second = _read(s.bootstrap_servers, topic_name, 0, 0, 2)
    assert (first["key"], first["value"], first["topic"], first["partition"], first["offset"]) == (
        b"\x00\x01k",
        b"{}",
        topic_name,
        0,
        0,
    )
    assert json.loads(first["kafka_headers"]) == [
        {"key": "h", "value": "v1"},
        {"key": "h", "value": "v2"},
        {"key": "empty", "value": None},
        {"key": "bad", "value": "\ufffd\ufffdok"},
        {"key": "q", "value": '"\\\n\x00'},
    ]
    assert first["timestamp"].isoformat() == "2023-11-14T22:13:20.123000+00:00"
    assert (second["key"], second["value"], second["kafka_headers"]) == (None, None, "[]")
    assert second["timestamp"].isoformat() == "1000-01-01T00:00:00+00:00"  # not shifted by calendars


def test_records_deleted_before_they_are_read_fail_the_read(running_stack, topic_name):
    s = running_stack
    ensure_topic(s.bootstrap_servers, topic_name, 1, log=lambda m: None)
    producer = Producer({"bootstrap.servers": s.bootstrap_servers, "enable.idempotence": True})
    for i in range(10):
        producer.produce(topic_name, value=str(i).encode())
    producer.flush(10)
    admin = AdminClient({"bootstrap.servers": s.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic_name, 0, 4)]).values():
        future.result(10)

    lost = rf"deleted records of {topic_name}\[0\] in the planned range \[0, 10\)"
    with pytest.raises(ReadDataLossError, match=lost):
        _read(s.bootstrap_servers, topic_name, 0, 0, 10)
    assert [r["value"] for r in _read(s.bootstrap_servers, topic_name, 0, 4, 10)] == [
        str(i).encode() for i in range(4, 10)
    ]
