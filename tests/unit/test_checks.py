"""The record rules and the Arrow batch check without Spark: the edges tests/unit/test_transform.py
(which runs the same rules through Spark) does not reach."""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from eosflow.transform import BatchCheck, checked_columns
from eosflow_dev.produce import events
from tests.orders import COLUMNS, NAMES, SCHEMA, check_value, record_check

CHECKED_COLUMNS = checked_columns(SCHEMA)

GOOD = json.loads(next(events.generate(seed=3, count=1)).value)


def value(**changes: object) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_every_produced_event_is_valid_and_typed_as_written():
    for e in events.generate(seed=11, count=2_000):
        error, typed = check_value(e.value, 65_536)
        assert error is None, (error, e.value)
        body = json.loads(e.value)
        fields = dict(zip(NAMES, typed, strict=True))
        assert fields["event_time"] == datetime.fromisoformat(body["event_time"])
        assert {k: v for k, v in fields.items() if k != "event_time"} == {
            k: v for k, v in body.items() if k != "event_time"
        }


@pytest.mark.parametrize(
    ("event_time", "expected"),
    [
        ("2026-01-01T00:00:00.123456789Z", datetime(2026, 1, 1, 0, 0, 0, 123456, UTC)),  # truncated
        ("2026-01-01T18:00:00+18:00", datetime(2026, 1, 1, tzinfo=UTC)),
        ("2026-01-01T00:00:00-18:00", datetime(2026, 1, 1, 18, tzinfo=UTC)),
        ("2026-01-01T00:00:00-00:00", datetime(2026, 1, 1, tzinfo=UTC)),
    ],
)
def test_instants_at_the_edges_are_read_exactly(event_time, expected):
    error, typed = check_value(value(event_time=event_time), 4096)
    assert error is None
    assert typed[2] == expected and typed[2].utcoffset() is not None


@pytest.mark.parametrize(
    "event_time",
    [
        "2026-01-01T00:00:00+18:01",  # beyond the offsets Java and Postgres accept
        "2026-01-01T00:00:00+19:00",
        "2026-01-01T00:00:00+02:60",
        "2026-01-01T00:00:00+0200",
        "٢٠٢٦-01-01T00:00:00Z",  # non-ASCII digits: Python's \d would take them
        "2026-01-01T23:59:60Z",
        "0000-01-01T00:00:00Z",
        "2026-001T00:00:00Z",
        "2026-01-01T00:00:00.Z",
        "2026-01-01T00:00:00.1234567890Z",
    ],
)
def test_instants_outside_the_contract_are_mistyped(event_time):
    error, _ = check_value(value(event_time=event_time), 4096)
    assert error == f"mistyped field: event_time (expected {COLUMNS[2].type.expected})"


@pytest.mark.parametrize(
    "text",
    [
        value()[:-1] + b',"x":Infinity}',
        value()[:-1] + b',"x":-Infinity}',
        value()[:-1] + b',"x":{"y":"\\udc00"}}',  # a lone surrogate deep in an extra field
        value()[:-1] + b',"\\ud800":1}',  # ... or in a key
        value()[:-1] + b',"x":{"k":1,"k":2}}',  # a duplicate key in a nested object
        b'{"x":' + b"[" * 50_000 + b"]" * 50_000 + b"}",  # deeper than the interpreter's stack
        value()[:-1] + b',"x":"a\tb"}',  # a raw control character inside a string
    ],
)
def test_what_is_not_strict_json_is_rejected_as_such(text):
    assert check_value(text, 1_000_000) == ("not JSON", None)


def test_a_surrogate_pair_escape_is_one_character_and_valid():
    text = value(order_id="ord-\U0001f600")
    assert b"\\ud83d\\ude00" in text  # json.dumps writes it as an escaped pair
    error, typed = check_value(text, 4096)
    assert error is None and typed[3] == "ord-\U0001f600"


def test_booleans_are_not_integers():
    assert (
        check_value(value(schema_version=True), 4096)[0]
        == "mistyped field: schema_version (expected 32-bit integer)"
    )


def _kafka_batch(values: list[bytes | None], keys: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["t"] * n, pa.large_string()),  # Spark may hand over large types
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=1)))] * n),
            "kafka_headers": pa.array(["[]"] * n, pa.string()),
        }
    )


def test_a_batch_check_returns_every_row_once_in_the_declared_columns():
    values = [value(), None, b"{}", value(amount_cents=0), b"\xff"]
    checked = BatchCheck("p", "b", "v", 4096, SCHEMA)(_kafka_batch(values, [b"k", None, b"k\xff", b"", b"x"]))
    assert checked.schema.names == [name for name, _ in CHECKED_COLUMNS]
    assert checked.column("kafka_offset").to_pylist() == list(range(len(values)))
    # Raw bytes are kept for rejected rows only: a valid row's columns already hold what it said.
    assert checked.column("raw_value").to_pylist() == [None, None, b"{}", values[3], b"\xff"]
    assert checked.column("raw_key").to_pylist() == [None, None, b"k\xff", b"", b"x"]
    assert checked.column("error").to_pylist() == [
        None,
        "null value",
        "missing field: event_id",
        "invalid value: amount_cents (must be >= 1, got 0)",
        "not UTF-8",
    ]
    assert checked.column("event_id").to_pylist() == [GOOD["event_id"], None, None, None, None]
    assert checked.column("kafka_key").to_pylist() == ["k", None, "k\ufffd", "", "x"]
    assert checked.column("kafka_timestamp")[0].as_py() == datetime(2025, 12, 31, 23, tzinfo=UTC)
    assert str(checked.schema.field("kafka_topic").type) == "string"


@pytest.mark.parametrize("enabled", [True, False])
def test_a_batch_check_leaves_the_garbage_collector_as_it_found_it(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        BatchCheck("p", "b", "v", 4096, SCHEMA)(_kafka_batch([value()], [b"k"]))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_a_batch_without_rejections_carries_no_raw_bytes():
    checked = BatchCheck("p", "b", "v", 4096, SCHEMA)(_kafka_batch([value(), value()], [b"k", b"j"]))
    assert checked.column("error").null_count == 2
    assert checked.column("raw_value").null_count == 2 and checked.column("raw_key").null_count == 2


def test_an_empty_batch_checks_to_an_empty_batch():
    checked = BatchCheck("p", "b", "v", 4096, SCHEMA)(_kafka_batch([], []))
    assert checked.num_rows == 0 and checked.schema.names == [name for name, _ in CHECKED_COLUMNS]


def test_max_value_bytes_must_be_positive():
    with pytest.raises(ValueError, match="max_value_bytes must be >= 1"):
        BatchCheck("p", "b", "v", 0, SCHEMA)


# Values each field may take in the fuzz below: valid ones, every JSON type, and the edges of the rules.
_CANDIDATES: dict[str, list[object]] = {
    "event_id": [GOOD["event_id"], GOOD["event_id"].upper(), "x", 7, None, [GOOD["event_id"]]],
    "event_type": ["order_paid", "order_refunded", "", 5, True, None, {"t": "order_paid"}],
    "event_time": [
        "2026-01-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-01-01",
        1.5,
        None,
        "+19:00",
        "0001-01-01T00:00:00+00:01",
        "9999-12-31T23:59:59-00:01",
    ],
    "order_id": ["ord-1", "", 42, None, ["ord-1"], "o\x00"],
    "customer_id": ["cus-1", {"id": 1}, None, 0, "\x00"],
    "amount_cents": [1250, 0, -5, 2**63 - 1, 2**63, 12.0, "12", True, None],
    "currency": ["EUR", "eur", "EURO", "EUR\n", 3, None],
    "schema_version": [1, 2, 0, 1.0, "1", True, None],
}


def test_the_fast_path_accepts_exactly_what_the_ordered_rules_accept():
    import random

    check = record_check(4096)
    rng = random.Random(5)
    outcomes = set()
    for _ in range(20_000):
        doc = {}
        for name, options in _CANDIDATES.items():
            choice = options[0] if rng.random() < 0.6 else rng.choice(options)
            if choice is not None or rng.random() < 0.5:  # None: sometimes JSON null, sometimes absent
                doc[name] = choice
        fast, error = check.typed(doc), check.first_error(doc)
        assert (fast is None) == (error is not None), (doc, error)
        assert fast == check.typed_by_rules(doc), doc  # the compiled form and the rules agree
        if fast is not None:
            assert fast == [c.type.accept(doc[c.name]) for c in COLUMNS]
        outcomes.add(error.split(":")[0] if error else "valid")
    # The fuzz reached every kind of outcome, so the equivalence above was tested on each.
    assert outcomes == {"valid", "missing field", "mistyped field", "invalid value"}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"order_id": "ord-\x00"}, "invalid value: order_id (holds a NUL character"),
        ({"customer_id": "\x00"}, "invalid value: customer_id (holds a NUL character"),
        ({"event_time": "0001-01-01T00:00:00+00:01"}, "invalid value: event_time (before 0001-01-01"),
        ({"event_time": "9999-12-31T23:59:59-00:01"}, "invalid value: event_time (before 0001-01-01"),
    ],
)
def test_values_postgres_cannot_store_are_invalid(changes, error):
    found, typed = check_value(value(**changes), 4096)
    assert typed is None and found.startswith(error), found


@pytest.mark.parametrize(
    "event_time", ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00-05:00", "9999-12-31T23:59:59+05:00"]
)
def test_instants_that_stay_inside_years_1_to_9999_in_utc_are_valid(event_time):
    assert check_value(value(event_time=event_time), 4096)[0] is None


def test_a_nul_in_the_key_or_a_header_rejects_a_valid_record_and_only_that():
    batch = _kafka_batch(
        [value()] * 5 + [None], [b"k", b"k\x00", (7).to_bytes(4, "big"), b"k", b"k", b"\x00"]
    )
    headers = [
        "[]",
        "[]",
        "[]",
        '[{"key":"trace","value":"a\\u0000b"}]',  # a NUL, escaped in the JSON Spark writes
        '[{"key":"h","value":"back\\\\u0000slash"}]',  # a backslash, then u0000: no NUL
        "[]",
    ]
    batch = batch.set_column(6, "kafka_headers", pa.array(headers, pa.string()))
    errors = BatchCheck("p", "b", "v", 4096, SCHEMA)(batch).column("error").to_pylist()
    assert errors[0] is None and errors[4] is None
    assert errors[1].startswith("invalid key: holds a NUL") and errors[2] == errors[1]
    assert errors[3] == "invalid header: trace holds a NUL character, which Postgres jsonb cannot store"
    assert errors[5] == "null value"  # the value's own check comes first


def test_a_header_name_holding_a_nul_is_named_with_a_question_mark():
    batch = _kafka_batch([value()], [b"k"])
    batch = batch.set_column(6, "kafka_headers", pa.array(['[{"key":"a\\u0000b","value":null}]']))
    (error,) = BatchCheck("p", "b", "v", 4096, SCHEMA)(batch).column("error").to_pylist()
    assert error == "invalid header: a?b holds a NUL character, which Postgres jsonb cannot store"


def test_what_only_looks_like_a_nul_in_a_key_is_kept_as_text():
    # C0 80 is NUL's overlong form (Java's modified UTF-8): invalid, so U+FFFD twice, never a NUL.
    checked = BatchCheck("p", "b", "v", 4096, SCHEMA)(_kafka_batch([value()] * 2, [b"\xc0\x80", b"k\\u0000"]))
    assert checked.column("error").to_pylist() == [None, None]
    assert checked.column("kafka_key").to_pylist() == ["\ufffd\ufffd", "k\\u0000"]


def test_a_record_the_kafka_columns_reject_has_no_typed_fields_like_every_rejected_row():
    checked = BatchCheck("p", "b", "v", 4096, SCHEMA)(_kafka_batch([value(), value()], [b"k", b"\x00"]))
    assert checked.column("error").to_pylist()[0] is None
    assert checked.column("event_id").to_pylist() == [GOOD["event_id"], None]
    assert checked.column("amount_cents").to_pylist() == [GOOD["amount_cents"], None]


_FIRST_US = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
_LAST_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z


def _with_timestamps(batch: pa.RecordBatch, micros: list[int | None]) -> pa.RecordBatch:
    # As Spark hands them over: microseconds, with the session's zone.
    stamps = pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return batch.set_column(batch.schema.get_field_index("timestamp"), "timestamp", stamps)


def test_kafka_timestamps_in_years_1_to_9999_are_kept_exactly():
    micros = [_FIRST_US, _LAST_US, 0, -1, None]
    checked = BatchCheck("p", "b", "v", 4096, SCHEMA)(
        _with_timestamps(_kafka_batch([value()] * 5, [b"k"] * 5), micros)
    )
    assert checked.column("error").to_pylist() == [None] * 5
    assert checked.column("kafka_timestamp").cast(pa.int64()).to_pylist() == micros


@pytest.mark.parametrize(
    ("micros", "message"),
    [
        (_LAST_US + 1, "invalid timestamp: 253402300800000 ms since 1970-01-01 is after 9999-12-31 in UTC"),
        (  # a producer that wrote microseconds: Arrow's CSV writer cannot even write year 57970
            1_767_225_600_123_456_000,
            "invalid timestamp: 1767225600123456 ms since 1970-01-01 is after 9999-12-31 in UTC",
        ),
        (2**63 - 1, "invalid timestamp: 9223372036854775 ms since 1970-01-01 is after 9999-12-31 in UTC"),
        (_FIRST_US - 1, "invalid timestamp: -62135596800001 ms since 1970-01-01 is before 0001-01-01 in UTC"),
        (-(2**63), "invalid timestamp: -9223372036854776 ms since 1970-01-01 is before 0001-01-01 in UTC"),
    ],
)
def test_a_kafka_timestamp_outside_years_1_to_9999_is_the_first_error_and_is_not_kept(micros, message):
    # Every kind of record: valid, a bad value, a NUL key; the timestamp's reason wins for each.
    values, keys = [value(), None, b"{}", value()], [b"k", b"k", b"k", b"\x00"]
    batch = _with_timestamps(_kafka_batch(values + [value()], keys + [b"k"]), [micros] * 4 + [0])
    checked = BatchCheck("p", "b", "v", 4096, SCHEMA)(batch)
    message += " (kafka_timestamp is NULL)"
    assert checked.column("error").to_pylist() == [message] * 4 + [None]
    assert checked.column("kafka_timestamp").cast(pa.int64()).to_pylist() == [None] * 4 + [0]
    assert checked.column("event_id").to_pylist() == [None] * 4 + [GOOD["event_id"]]
    assert checked.column("raw_value").to_pylist() == values + [None]  # a rejected row's bytes as read
    assert checked.column("raw_key").to_pylist() == keys + [None]
