"""Values the checks once accepted and Postgres refused (issue 13, item 2): each must become a rejected
row with its reason, never a failed COPY that every retry repeats.

One pipeline per value, so that each poison pill shows on its own: before the fix, each of these
stopped its pipeline for good.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from eosflow.ledger import positions

pytestmark = pytest.mark.integration

GOOD = {
    "event_id": "0b7e1c52-3f0e-4f5e-9a43-6f7f0d5b1a01",
    "event_type": "order_paid",
    "event_time": "2026-01-01T00:00:00Z",
    "order_id": "ord-1",
    "customer_id": "cus-1",
    "amount_cents": 100,
    "currency": "EUR",
    "schema_version": 1,
}

# (case id, value changes, key, headers, the rejection's reason)
POISON = [
    ("nul-in-order-id", {"order_id": "ord-\u0000"}, b"k", None, "invalid value: order_id (holds a NUL"),
    ("nul-in-customer-id", {"customer_id": "\u0000"}, b"k", None, "invalid value: customer_id (holds a NUL"),
    ("nul-in-key", {}, b"k\x00ey", None, "invalid key: holds a NUL"),
    ("int-key", {}, (7).to_bytes(4, "big"), None, "invalid key: holds a NUL"),
    ("nul-in-header", {}, b"k", [("trace", b"a\x00b")], "invalid header: trace holds a NUL"),
    # Spark makes a header value valid UTF-8 (U+FFFD for the bad byte), and keeps the NUL beside it.
    ("nul-in-invalid-utf8-header", {}, b"k", [("h", b"\xff\x00")], "invalid header: h holds a NUL"),
    (
        "nul-in-second-header",
        {},
        b"k",
        [("a", b"back\\u0000slash"), ("b", b"\x00")],  # the first only looks like a NUL escape
        "invalid header: b holds a NUL",
    ),
    ("nul-in-key-and-header", {}, b"\x00", [("h", b"\x00")], "invalid key: holds a NUL"),  # key first
    ("nul-in-order-id-and-key", {"order_id": "\u0000"}, b"\x00", None, "invalid value: order_id (holds"),
    (
        "year-1-east-of-utc",
        {"event_time": "0001-01-01T00:30:00+01:00"},
        b"k",
        None,
        "invalid value: event_time (before 0001-01-01 or after 9999-12-31 in UTC)",
    ),
    (
        "year-9999-west-of-utc",
        {"event_time": "9999-12-31T23:30:00-01:00"},
        b"k",
        None,
        "invalid value: event_time (before 0001-01-01 or after 9999-12-31 in UTC)",
    ),
]


@pytest.mark.parametrize(
    ("changes", "key", "headers", "reason"), [p[1:] for p in POISON], ids=[p[0] for p in POISON]
)
def test_a_value_postgres_cannot_store_is_a_rejected_row_and_the_run_commits(
    case, changes, key, headers, reason
):
    case.create_topic(1)
    poison = json.dumps(GOOD | {"event_id": GOOD["event_id"][:-2] + "99"} | changes).encode()
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})
    producer.produce(case.topic, value=json.dumps(GOOD).encode(), key=b"k", partition=0)
    producer.produce(case.topic, value=poison, key=key, headers=headers, partition=0)
    producer.produce(
        case.topic, value=json.dumps(GOOD | {"event_id": GOOD["event_id"][:-2] + "02"}).encode(), partition=0
    )
    producer.flush(10)

    summary = case.ingest()
    assert summary.outcome == positions.COMMITTED
    ((partition, offset, error, raw_value),) = case.rejected()
    assert (partition, offset) == (0, 1) and error.startswith(reason), error
    assert bytes(raw_value) == poison  # the record's bytes are kept untouched
    ((raw_key,),) = case.query("select raw_key from eosflow.rejected where pipeline = %s", case.name)
    assert bytes(raw_key) == key
    assert len(case.event_ids()) == 2
    assert case.violations() == []


def test_text_that_only_looks_like_a_nul_escape_lands_as_it_is(case):
    case.create_topic(1)
    looks_like = "back\\u0000slash"  # a backslash, then u0000: six characters, no NUL
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})
    producer.produce(
        case.topic,
        value=json.dumps(GOOD | {"order_id": looks_like}).encode(),
        key=looks_like.encode(),
        headers=[("h", looks_like.encode())],
        partition=0,
    )
    producer.flush(10)
    case.ingest()
    assert case.rejected() == []
    assert case.query(f"select order_id, kafka_key, kafka_headers from {case.table}") == [
        (looks_like, looks_like, [{"key": "h", "value": looks_like}])
    ]


def test_a_nul_in_a_header_name_cuts_the_name_there_and_the_record_lands(case, spark):
    # Java clients send a header name whole; librdkafka's C API, which eosflow reads ranges with, hands
    # header names over as C strings, cut at their first NUL. Spark's Kafka source (eosflow's reader
    # until issue 29) saw the NUL and the record was rejected; now the record lands, the name cut
    # (docs/DESIGN.md, "Bad records"). A NUL in a header's value is kept or refused as before.
    case.create_topic(1)
    other = json.dumps(GOOD | {"event_id": GOOD["event_id"][:-2] + "99"}).encode()
    records = spark.createDataFrame(
        [(b"k", json.dumps(GOOD).encode(), []), (b"k", other, [("a\x00b", b"v")])],
        "key binary, value binary, headers array<struct<key: string, value: binary>>",
    )
    writer = records.coalesce(1).write.format("kafka").option("topic", case.topic)
    writer.option("kafka.bootstrap.servers", case.settings.bootstrap_servers).save()  # in order, one task

    assert case.ingest().outcome == positions.COMMITTED
    assert case.rejected() == []
    assert case.query(f"select kafka_offset, kafka_headers from {case.table} order by 1") == [
        (0, []),
        (1, [{"key": "a", "value": "v"}]),
    ]
    assert case.violations() == []


# Kafka's timestamps the warehouse cannot keep. Since Kafka 4.0 a broker refuses timestamps more than an
# hour ahead by default (message.timestamp.after.max.ms), but a topic may allow any; the past is open
# by default (message.timestamp.before.max.ms): the local Kafka 4.2 takes year 0 and negative years.
# The milliseconds in the reason are Kafka's own: eosflow reads the records itself (Spark's source shifted
# instants before 1582-10-15 from Julian to Gregorian, and failed the whole read past its microseconds).
# (case id, Kafka timestamp in ms, the rejection's reason)
BAD_TIMESTAMPS = [
    (
        "written-in-nanoseconds",  # past what microseconds in 64 bits can count: Spark could not read it
        1_767_225_600_123_456_789,
        "invalid timestamp: 1767225600123456789 ms since 1970-01-01 is after 9999-12-31 in UTC",
    ),
    (
        "written-in-microseconds",  # a producer bug: Arrow's CSV writer cannot write year 57970
        1_767_225_600_123_456,
        "invalid timestamp: 1767225600123456 ms since 1970-01-01 is after 9999-12-31 in UTC",
    ),
    (
        "year-10000",  # Postgres keeps it, no Python client reads it back
        253_402_300_800_000,
        "invalid timestamp: 253402300800000 ms since 1970-01-01 is after 9999-12-31 in UTC",
    ),
    (
        "year-0",  # refused by Postgres in the form the COPY writes
        -62_135_596_800_001,
        "invalid timestamp: -62135596800001 ms since 1970-01-01 is before 0001-01-01 in UTC",
    ),
    (
        "year-minus-1199",
        -100_000_000_000_000,
        "invalid timestamp: -100000000000000 ms since 1970-01-01 is before 0001-01-01 in UTC",
    ),
]
ANY_TIMESTAMP = {"message.timestamp.after.max.ms": str(2**63 - 1)}


@pytest.mark.parametrize(
    ("ms", "reason"), [b[1:] for b in BAD_TIMESTAMPS], ids=[b[0] for b in BAD_TIMESTAMPS]
)
def test_a_kafka_timestamp_the_warehouse_cannot_keep_is_a_rejected_row_without_it(case, ms, reason):
    case.create_topic(1, ANY_TIMESTAMP)
    poison = json.dumps(GOOD | {"event_id": GOOD["event_id"][:-2] + "99"}).encode()
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})
    producer.produce(case.topic, value=json.dumps(GOOD).encode(), key=b"k", partition=0)
    producer.produce(case.topic, value=poison, key=b"k", partition=0, timestamp=ms)
    producer.produce(case.topic, value=b"not json", key=b"k", partition=0, timestamp=ms)
    producer.flush(10)

    assert case.ingest().outcome == positions.COMMITTED
    rejected = case.query(
        "select kafka_offset, kafka_timestamp, error, raw_value from eosflow.rejected where pipeline = %s "
        "order by 1",
        case.name,
    )
    assert [(r[0], r[1], bytes(r[3])) for r in rejected] == [(1, None, poison), (2, None, b"not json")]
    # The timestamp is the first check: the rows cannot keep it, the reason can (and does, for both).
    side = "before 0001-01-01" if ms < 0 else "after 9999-12-31"
    for _, _, error, _ in rejected:
        assert error.startswith(reason), error
        assert error.endswith(f"is {side} in UTC (kafka_timestamp is NULL)"), error
    assert case.event_ids() == [GOOD["event_id"]]
    assert case.violations() == []


# Values at the edges of what the checks accept, which Postgres must store exactly as produced.
EDGE_TEXTS = ["\uffff", "\ufffe", "\U0010ffff", "\ufeff", "\u2028", "\x01\x1b\x7f\x85", "\ud7ff\ue000"]
EDGE_TIMES = {  # event_time -> the instant stored, in UTC
    "0001-01-01T00:00:00Z": "0001-01-01 00:00:00",
    "0001-01-01T18:00:00+18:00": "0001-01-01 00:00:00",
    "0001-01-01T00:00:00-18:00": "0001-01-01 18:00:00",
    "9999-12-31T23:59:59.999999999Z": "9999-12-31 23:59:59.999999",
    "9999-12-31T05:59:59.999999-18:00": "9999-12-31 23:59:59.999999",
    "9999-12-31T23:59:59+18:00": "9999-12-31 05:59:59",
}
EDGE_KAFKA_TIMESTAMPS = {  # Kafka timestamp (ms) -> the instant stored, in UTC
    253_402_300_799_999: "9999-12-31 23:59:59.999",
    1: "1970-01-01 00:00:00.001",
    -1: "1969-12-31 23:59:59.999",  # NO_TIMESTAMP, from a client that sets none
    # Before the Gregorian calendar's first day: kept as Kafka holds it (proleptic Gregorian, as
    # Postgres counts), where Spark's source shifted it by the Julian calendar's days.
    -12_219_206_400_000: "1582-10-16 00:00:00",
    -30_610_224_000_000: "1000-01-01 00:00:00",
    -62_135_596_800_000: "0001-01-01 00:00:00",
}


def test_values_at_the_edges_of_the_checks_land_exactly_as_produced(case):
    case.write_config(max_value_bytes=1_000_000)
    case.create_topic(1, ANY_TIMESTAMP)
    producer = Producer(
        {"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True, "linger.ms": 50}
    )
    sent: list[tuple[dict, bytes, list, int | None]] = []

    def send(changes: dict, key: bytes = b"k", headers: list | None = None, timestamp: int | None = None):
        value = GOOD | {"event_id": GOOD["event_id"][:-4] + f"{len(sent):04d}"} | changes
        sent.append((value, key, headers or [], timestamp))
        extra = {} if timestamp is None else {"timestamp": timestamp}
        producer.produce(case.topic, json.dumps(value).encode(), key, partition=0, headers=headers, **extra)

    for text in EDGE_TEXTS:
        send({"order_id": text, "customer_id": text[::-1]}, text.encode(), [("h" + text, text.encode())])
    send({}, b"k\\u0000", [("h\\u0000", b"\\u0000")])  # six characters each time, no NUL
    for event_time in EDGE_TIMES:
        send({"event_time": event_time})
    for ms in EDGE_KAFKA_TIMESTAMPS:
        send({}, timestamp=ms)
    send({"amount_cents": 2**63 - 1})
    send({"order_id": "o" * 900_000})  # long text: no limit short of Kafka's message size
    send({}, b"k" * 100_000, [("h", b"v" * 100_000)])
    send({}, b"k", [(f"h{i}", b"v") for i in range(2_000)])
    producer.flush(30)

    assert case.ingest().outcome == positions.COMMITTED
    assert case.rejected() == []
    rows = case.query(
        "select kafka_key, kafka_headers, order_id, customer_id, amount_cents, "
        "(event_time at time zone 'UTC')::text, (kafka_timestamp at time zone 'UTC')::text "
        f"from {case.table} order by kafka_offset"
    )
    assert len(rows) == len(sent)
    for row, (value, key, headers, timestamp) in zip(rows, sent, strict=True):
        assert row[:5] == (
            key.decode(),
            [{"key": k, "value": v.decode()} for k, v in headers],
            value["order_id"],
            value["customer_id"],
            value["amount_cents"],
        ), value["event_id"]
        assert row[5] == EDGE_TIMES.get(value["event_time"], "2026-01-01 00:00:00")
        if timestamp is not None:
            assert row[6] == EDGE_KAFKA_TIMESTAMPS[timestamp]
    assert case.violations() == []


def test_a_timestamp_beyond_microseconds_is_a_rejected_row_and_the_run_goes_on(case):
    # A producer writing nanoseconds on a topic that allows any timestamp. Spark's Kafka source failed the
    # whole read on it, and no retry could pass it; eosflow's own reader hands Kafka's milliseconds on.
    case.create_topic(1, ANY_TIMESTAMP)
    poison, good = json.dumps(GOOD).encode(), GOOD | {"event_id": GOOD["event_id"][:-2] + "98"}
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})
    producer.produce(case.topic, value=poison, partition=0, timestamp=1_767_225_600_123_456_789)
    producer.produce(case.topic, value=json.dumps(good).encode(), partition=0)
    producer.flush(10)
    done = case.ingest_process()
    assert done.returncode == 0, done.stderr[-2000:]
    ((offset, error, raw_value),) = [r[1:] for r in case.rejected()]
    assert offset == 0 and bytes(raw_value) == poison
    assert error.startswith("invalid timestamp: 1767225600123456789 ms since 1970-01-01"), error
    assert case.event_ids() == [good["event_id"]]
    assert case.violations() == []
