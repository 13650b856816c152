"""The orders declaration's transform on real Spark: typed rows, one error per rejected row, no loss.

Most cases run in one shared batch (one row each, own Kafka coordinates) collected once per module,
which keeps the Spark work to a handful of jobs; each case is still its own parametrized test.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import zip_longest

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from eosflow.schema.arrow import valid_columns
from eosflow.sources.batches import InMemoryRecords, record_batch
from eosflow.transform import REJECTED_COLUMNS, spark_type, transform
from eosflow_dev.produce import events
from tests.orders import SCHEMA


def transform_orders(source: InMemoryRecords, **args: object):
    return transform(source, **args, schema=SCHEMA)


def _spark_columns(columns) -> list[tuple[str, str]]:
    return [(name, spark_type(arrow_type)) for name, arrow_type in columns]


VALID_COLUMNS = _spark_columns(valid_columns(SCHEMA))


def records(spark: SparkSession, rows: list[tuple]) -> InMemoryRecords:
    """The rows as a task's Arrow batch of Kafka records, as a range read hands it over."""
    return InMemoryRecords(spark, [record_batch(rows)])


MAX_VALUE_BYTES = 512
ARGS = {
    "pipeline": "orders-pipeline",
    "batch_id": "batch-0007",
    "transform_version": "transform-v1",
    "max_value_bytes": MAX_VALUE_BYTES,
    "declaration_version": 3,
}
TOPIC = "orders"
BASE_TS = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
KEY = b"cus-000042"
EVENT_ID = "0b9a4f3e-5c6d-4e7f-8a9b-0c1d2e3f4a5b"
GOOD = {
    "event_id": EVENT_ID,
    "event_type": "order_paid",
    "event_time": "2026-01-01T00:00:00.123Z",
    "order_id": "ord-0000000042",
    "customer_id": "cus-000042",
    "amount_cents": 1250,
    "currency": "EUR",
    "schema_version": 1,
}
FIELDS = list(GOOD)

DROP = object()  # event(field=DROP) leaves the field out


class Raw(str):
    """A JSON token written verbatim, for tokens json.dumps cannot produce (1e2, 1.0, NaN, 01)."""


def event(**changes: object) -> bytes:
    """The GOOD event as compact JSON bytes, with fields replaced, added or dropped."""
    body = {**GOOD, **changes}
    members = [
        f"{json.dumps(k)}:{v if isinstance(v, Raw) else json.dumps(v)}"
        for k, v in body.items()
        if v is not DROP
    ]
    return ("{" + ",".join(members) + "}").encode()


def padded(size: int) -> bytes:
    """A valid event of exactly `size` bytes (order_id is padded)."""
    value = event(order_id="")
    return event(order_id="o" * (size - len(value)))


def _utc(ts: datetime) -> datetime:
    """A collected timestamp as an aware UTC datetime (PySpark returns naive local time)."""
    return ts.astimezone(UTC)


@dataclass(frozen=True)
class Case:
    id: str
    value: bytes | None
    expected: str | None  # the error's prefix; None means the row must be valid
    key: bytes | None = KEY
    headers: list[tuple[str, bytes | None]] | None = None
    check: dict[str, object] = field(default_factory=dict)  # extra expected columns of a valid row


def _missing(name: str) -> Case:
    return Case(f"missing-{name}", event(**{name: DROP}), f"missing field: {name}")


def _mistyped(id_: str, name: str, token: object) -> Case:
    return Case(f"mistyped-{id_}", event(**{name: token}), f"mistyped field: {name} (expected ")


def _invalid(id_: str, name: str, token: object) -> Case:
    return Case(f"invalid-{id_}", event(**{name: token}), f"invalid value: {name} (")


RULE_CASES = [
    # 2. null value
    Case("null-value", None, "null value"),
    # 3. oversized
    Case("oversized-json", padded(MAX_VALUE_BYTES + 1), f"oversized: 513 bytes > {MAX_VALUE_BYTES}"),
    Case("oversized-text", b"x" * 5000, f"oversized: 5000 bytes > {MAX_VALUE_BYTES}"),
    # 4. not UTF-8
    Case("utf8-stray-byte", event().replace(b"ord-", b"ord-\xff"), "not UTF-8"),
    Case("utf8-truncated-sequence", event().replace(b"ord-", b"ord-\xc3"), "not UTF-8"),
    Case("utf8-encoded-surrogate", event().replace(b"ord-", b"ord-\xed\xa0\x80"), "not UTF-8"),
    Case("utf8-overlong", event().replace(b"ord-", b"ord\xc0\xad"), "not UTF-8"),
    Case("utf8-latin1", event().replace(b"cus-", "cús-".encode("latin-1")), "not UTF-8"),
    # 5. not JSON
    Case("json-malformed", b'{"event_id": ', "not JSON"),
    Case("json-empty", b"", "not JSON"),
    Case("json-blank", b" \n\t", "not JSON"),
    Case("json-array", b"[1,2]", "not JSON"),
    Case("json-string", b'"str"', "not JSON"),
    Case("json-number", b"42", "not JSON"),
    Case("json-null-literal", b"null", "not JSON"),
    Case("json-array-of-event", b"[" + event() + b"]", "not JSON"),
    Case("json-single-quotes", event().replace(b'"', b"'"), "not JSON"),
    Case("json-nan", event(amount_cents=Raw("NaN")), "not JSON"),
    Case("json-leading-zero", event(amount_cents=Raw("01250")), "not JSON"),
    Case("json-bom", b"\xef\xbb\xbf" + event(), "not JSON"),
    Case("json-duplicate-key", event()[:-1] + b',"currency":"USD"}', "not JSON"),
    # Grammatically JSON, but not Unicode: spark.sql.variant.validateUnicodeInJsonParsing rejects it.
    Case("json-lone-surrogate-escape", event(order_id=Raw('"ord-\\ud800"')), "not JSON"),
    # Spark's own JSON parsers ignore anything after the first value; these must still be rejected.
    Case("json-trailing-garbage", event() + b" junk", "not JSON"),
    Case("json-two-objects", event() + event(), "not JSON"),
    Case("json-trailing-bracket", event() + b"]", "not JSON"),
    Case("json-trailing-brace", event() + b"}", "not JSON"),
    Case("json-trailing-comma-value", event() + b',{"a":1}', "not JSON"),
    # 6. missing field (absent, or JSON null)
    *[_missing(name) for name in FIELDS],
    Case("null-event_id", event(event_id=None), "missing field: event_id"),
    Case("null-amount_cents", event(amount_cents=None), "missing field: amount_cents"),
    Case("null-schema_version", event(schema_version=None), "missing field: schema_version"),
    # 7. mistyped field: strict JSON types, no coercion
    _mistyped("event_id-number", "event_id", 123),
    _mistyped("event_id-not-uuid", "event_id", "not-a-uuid"),
    _mistyped("event_id-upper-case", "event_id", EVENT_ID.upper()),
    _mistyped("event_id-braces", "event_id", "{" + EVENT_ID + "}"),
    _mistyped("event_id-urn", "event_id", "urn:uuid:" + EVENT_ID),
    _mistyped("event_id-no-dashes", "event_id", EVENT_ID.replace("-", "")),
    _mistyped("event_id-trailing-newline", "event_id", EVENT_ID + "\n"),
    _mistyped("event_type-number", "event_type", 5),
    _mistyped("event_type-array", "event_type", ["order_paid"]),
    _mistyped("event_time-text", "event_time", "yesterday"),
    _mistyped("event_time-impossible-date", "event_time", "2026-02-30T00:00:00Z"),
    _mistyped("event_time-no-zone", "event_time", "2026-01-01T00:00:00.123"),
    _mistyped("event_time-space", "event_time", "2026-01-01 00:00:00Z"),
    _mistyped("event_time-date-only", "event_time", "2026-01-01"),
    _mistyped("event_time-trailing-newline", "event_time", "2026-01-01T00:00:00Z\n"),
    _mistyped("event_time-epoch-millis", "event_time", 1767225600000),
    _mistyped("order_id-number", "order_id", 42),
    _mistyped("customer_id-object", "customer_id", {"id": 42}),
    _mistyped("amount_cents-string", "amount_cents", "12"),
    _mistyped("amount_cents-fraction", "amount_cents", Raw("1.5")),
    _mistyped("amount_cents-integral-decimal", "amount_cents", Raw("1250.0")),
    _mistyped("amount_cents-exponent", "amount_cents", Raw("1e3")),
    _mistyped("amount_cents-beyond-bigint", "amount_cents", Raw("9223372036854775808")),
    _mistyped("amount_cents-boolean", "amount_cents", True),
    _mistyped("amount_cents-array", "amount_cents", [1250]),
    _mistyped("currency-array", "currency", ["EUR"]),
    _mistyped("schema_version-string", "schema_version", "1"),
    _mistyped("schema_version-decimal", "schema_version", Raw("1.0")),
    # 8. invalid value
    _invalid("event_type-unknown", "event_type", "order_refunded"),
    _invalid("event_type-upper-case", "event_type", "ORDER_PAID"),
    _invalid("event_type-empty", "event_type", ""),
    _invalid("amount_cents-zero", "amount_cents", 0),
    _invalid("amount_cents-negative", "amount_cents", -5),
    _invalid("currency-lower-case", "currency", "eur"),
    _invalid("currency-four-letters", "currency", "EURO"),
    _invalid("currency-two-letters", "currency", "EU"),
    _invalid("currency-trailing-newline", "currency", "EUR\n"),
    _invalid("currency-non-ascii", "currency", "ÉUR"),
    _invalid("schema_version-2", "schema_version", 2),
    _invalid("schema_version-0", "schema_version", 0),
    # ... among them what Postgres cannot store
    _invalid("order_id-nul", "order_id", "ord-\x00"),
    _invalid("customer_id-nul", "customer_id", "\x00"),
    _invalid("event_time-year-0-in-utc", "event_time", "0001-01-01T00:00:00+00:01"),
    _invalid("event_time-year-10000-in-utc", "event_time", "9999-12-31T23:59:59-00:01"),
    # 9. invalid key, 10. invalid header (1. invalid timestamp: see the test of Kafka timestamps)
    Case("key-nul", event(), "invalid key: holds a NUL character", key=b"k\x00"),
    Case("key-binary-number", event(), "invalid key: holds a NUL character", key=(7).to_bytes(4, "big")),
    Case("header-value-nul", event(), "invalid header: h holds a NUL", headers=[("h", b"a\x00b")]),
    Case("header-name-nul", event(), "invalid header: a?b holds a NUL", headers=[("a\x00b", b"v")]),
    Case("header-value-not-utf8-nul", event(), "invalid header: h holds a NUL", headers=[("h", b"\xff\x00")]),
]

ORDER_CASES = [
    Case("null-value-not-json", None, "null value", key=None),
    Case("value-beats-key", b"{}", "missing field: event_id", key=b"\x00"),
    Case("key-beats-header", event(), "invalid key", key=b"\x00", headers=[("h", b"\x00")]),
    Case(
        "first-nul-header-named",
        event(),
        "invalid header: second holds",
        headers=[("first", b"back\\u0000slash"), ("second", b"\x00"), ("third", b"\x00")],
    ),
    Case("oversized-beats-utf8", b"\xff" * 600, "oversized: 600 bytes > 512"),
    Case("oversized-beats-json", b"{" * 600, "oversized: 600 bytes > 512"),
    Case("utf8-beats-json", b"\xff not json", "not UTF-8"),
    Case("json-beats-missing", b'[{"event_id": 1}]', "not JSON"),
    Case("first-missing-in-field-order", event(currency=DROP, event_type=DROP), "missing field: event_type"),
    Case("missing-beats-mistyped", event(event_id=123, schema_version=DROP), "missing field: schema_version"),
    Case(
        "first-mistyped-in-field-order", event(amount_cents="12", event_type=5), "mistyped field: event_type"
    ),
    Case(
        "mistyped-beats-invalid",
        event(event_type="bogus", schema_version="1"),
        "mistyped field: schema_version",
    ),
    Case(
        "first-invalid-in-field-order",
        event(amount_cents=0, currency="eur", event_type="bogus"),
        "invalid value: event_type",
    ),
]

HEADERS = [("trace-id", b"abc-123"), ("no-value", None), ("not-utf8", b"\xff")]
VALID_FULL = Case("valid-full", event(), None, headers=HEADERS)
VALID_CASES = [
    VALID_FULL,
    Case("valid-extra-fields", event(note="x", extra={"nested": [1, None]}), None),
    Case("valid-exactly-max-bytes", padded(MAX_VALUE_BYTES), None),
    Case("valid-whitespace", b"\n  " + json.dumps(GOOD, indent=2).encode() + b"\r\n\t ", None),
    Case("valid-field-order", json.dumps(dict(reversed(GOOD.items()))).encode(), None),
    Case(
        "valid-zone-offset",
        event(event_time="2026-01-01T02:30:00.5+02:30"),
        None,
        check={"event_time": datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)},
    ),
    Case(
        "valid-whole-seconds",
        event(event_time="2026-01-01T00:00:00Z"),
        None,
        check={"event_time": datetime(2026, 1, 1, tzinfo=UTC)},
    ),
    Case(
        "valid-max-bigint",
        event(amount_cents=Raw("9223372036854775807")),
        None,
        check={"amount_cents": 2**63 - 1},
    ),
    Case(
        "valid-utf8-text",
        event(customer_id=Raw('"cüs-€-😀"')),
        None,
        check={"customer_id": "cüs-€-😀"},
    ),
    Case(
        "valid-null-key-no-headers", event(), None, key=None, check={"kafka_key": None, "kafka_headers": "[]"}
    ),
    Case("valid-empty-headers", event(), None, headers=[], check={"kafka_headers": "[]"}),
    Case("valid-key-not-utf8", event(), None, key=b"k\xff", check={"kafka_key": "k\ufffd"}),
    Case(  # backslash, u, 0, 0, 0, 0: six characters, no NUL
        "valid-text-like-a-nul-escape",
        event(order_id="o\\u0000"),
        None,
        key=b"k\\u0000",
        headers=[("h\\u0000", b"\\u0000")],
        check={
            "order_id": "o\\u0000",
            "kafka_key": "k\\u0000",
            "kafka_headers": '[{"key":"h\\\\u0000","value":"\\\\u0000"}]',
        },
    ),
    Case("valid-overlong-nul-key", event(), None, key=b"\xc0\x80", check={"kafka_key": "\ufffd\ufffd"}),
]

ALL_CASES = RULE_CASES + ORDER_CASES + VALID_CASES
assert len({c.id for c in ALL_CASES}) == len(ALL_CASES), "case ids must be unique"

# The shape of every error: a fixed prefix, and the field name for the field-level rules.
ERROR_SHAPES = [
    r"null value",
    r"oversized: \d+ bytes > \d+",
    r"not UTF-8",
    r"not JSON",
    r"missing field: (?P<field>\w+)",
    r"mistyped field: (?P<field>\w+) \(expected .+\)",
    r"invalid value: (?P<field>\w+) \(.+\)",
    r"invalid timestamp: -?\d+ ms since 1970-01-01 is (before 0001-01-01|after 9999-12-31) in UTC "
    r"\(kafka_timestamp is NULL\)",
    r"invalid key: holds a NUL character, which Postgres text cannot store \(raw_key keeps the bytes\)",
    r"invalid header: .* holds a NUL character, which Postgres jsonb cannot store",
]


def _coords(index: int) -> tuple[int, int]:
    """(partition, offset) of the index-th row of a batch."""
    return index % 3, 100 + index


def _record(index: int, case: Case) -> tuple:
    partition, offset = _coords(index)
    return (
        case.key,
        case.value,
        TOPIC,
        partition,
        offset,
        BASE_TS + timedelta(seconds=index),
        case.headers,
    )


def _params(cases: list[Case]) -> list:
    return [pytest.param(c, id=c.id) for c in cases]


def _locate(case: Case) -> tuple[int, tuple[int, int]]:
    """A case's row index in the shared batch, and its (partition, offset)."""
    index = ALL_CASES.index(case)
    return index, _coords(index)


@dataclass(frozen=True)
class Outcome:
    valid: dict[tuple[int, int], Row]
    rejected: dict[tuple[int, int], Row]


@pytest.fixture(scope="module")
def outcome(spark: SparkSession) -> Outcome:
    """ALL_CASES through the transform in one batch, each output collected once."""
    df = records(spark, [_record(i, c) for i, c in enumerate(ALL_CASES)])
    result = transform_orders(df, **ARGS)
    return Outcome(
        valid={(r.kafka_partition, r.kafka_offset): r for r in result.valid.collect()},
        rejected={(r.kafka_partition, r.kafka_offset): r for r in result.rejected.collect()},
    )


def _assert_rejected(outcome: Outcome, case: Case) -> Row:
    """The case's row is rejected (only), with its raw bytes and Kafka coordinates untouched."""
    index, coords = _locate(case)
    assert coords not in outcome.valid
    row = outcome.rejected[coords]
    assert row.raw_value == case.value  # bytearray == bytes compares by content
    assert row.raw_key == case.key
    assert (row.kafka_topic, row.kafka_partition, row.kafka_offset) == (TOPIC, *coords)
    assert _utc(row.kafka_timestamp) == BASE_TS + timedelta(seconds=index)
    assert (row.pipeline, row.batch_id) == (ARGS["pipeline"], ARGS["batch_id"])
    return row


def _named_field(error: str) -> str | None:
    """The field an error names, asserting the error has one of the documented shapes."""
    for shape in ERROR_SHAPES:
        match = re.fullmatch(shape, error, flags=re.DOTALL)
        if match:
            return match.groupdict().get("field")
    raise AssertionError(f"error has no documented shape: {error!r}")


def _field_in(prefix: str) -> str | None:
    """The field an expected prefix names, if it is a field-level one."""
    match = re.match(r"(?:missing field|mistyped field|invalid value): (\w+)", prefix)
    return match.group(1) if match else None


def test_valid_record_maps_to_the_typed_row(outcome: Outcome) -> None:
    index, coords = _locate(VALID_FULL)
    assert coords not in outcome.rejected
    row = outcome.valid[coords].asDict()
    assert _utc(row.pop("kafka_timestamp")) == BASE_TS + timedelta(seconds=index)
    assert _utc(row.pop("event_time")) == datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)
    assert json.loads(row["kafka_headers"]) == [
        {"key": "trace-id", "value": "abc-123"},
        {"key": "no-value", "value": None},
        {"key": "not-utf8", "value": "\ufffd"},
    ]
    assert row == {
        "kafka_topic": TOPIC,
        "kafka_partition": coords[0],
        "kafka_offset": coords[1],
        "kafka_key": "cus-000042",
        "kafka_headers": row["kafka_headers"],  # compared as JSON above
        "event_id": EVENT_ID,
        "event_type": "order_paid",
        "order_id": "ord-0000000042",
        "customer_id": "cus-000042",
        "amount_cents": 1250,
        "currency": "EUR",
        "schema_version": 1,
        "batch_id": "batch-0007",
        "transform_version": "transform-v1",
        "declaration_version": 3,
    }


@pytest.mark.parametrize("case", _params(VALID_CASES))
def test_acceptable_variants_are_valid(outcome: Outcome, case: Case) -> None:
    _, coords = _locate(case)
    assert coords not in outcome.rejected, outcome.rejected.get(coords)
    row = outcome.valid[coords]
    assert row.event_id == EVENT_ID
    for column, expected in case.check.items():
        actual = row[column]
        assert (_utc(actual) if isinstance(actual, datetime) else actual) == expected, column


@pytest.mark.parametrize("case", _params(RULE_CASES))
def test_each_rule_rejects_with_its_error(outcome: Outcome, case: Case) -> None:
    row = _assert_rejected(outcome, case)
    assert row.error.startswith(case.expected), row.error
    assert _named_field(row.error) == _field_in(case.expected)


@pytest.mark.parametrize("case", _params(ORDER_CASES))
def test_first_failing_check_wins(outcome: Outcome, case: Case) -> None:
    row = _assert_rejected(outcome, case)
    assert row.error.startswith(case.expected), row.error


@pytest.mark.parametrize(
    ("case_id", "message"),
    [
        ("oversized-json", "oversized: 513 bytes > 512"),
        ("missing-currency", "missing field: currency"),
        ("mistyped-amount_cents-string", "mistyped field: amount_cents (expected 64-bit integer)"),
        ("mistyped-schema_version-string", "mistyped field: schema_version (expected 32-bit integer)"),
        (
            "mistyped-event_id-upper-case",
            "mistyped field: event_id (expected lower-case canonical UUID string)",
        ),
        ("invalid-amount_cents-negative", "invalid value: amount_cents (must be >= 1, got -5)"),
        ("invalid-currency-lower-case", "invalid value: currency (does not match ^[A-Z]{3}\\Z)"),
        ("invalid-schema_version-2", "invalid value: schema_version (not one of 1)"),
        (
            "invalid-event_type-unknown",
            "invalid value: event_type (not one of order_created, order_paid, order_shipped, "
            "order_cancelled)",
        ),
    ],
)
def test_messages_are_human_readable(outcome: Outcome, case_id: str, message: str) -> None:
    case = next(c for c in ALL_CASES if c.id == case_id)
    assert _assert_rejected(outcome, case).error == message


def test_mixed_batch_loses_and_duplicates_nothing(spark: SparkSession) -> None:
    produced = list(events.generate(seed=7, count=20))  # what the real producer writes
    bad_ids = {
        "null-value",
        "oversized-text",
        "utf8-stray-byte",
        "json-array",
        "json-trailing-garbage",
        "json-duplicate-key",
        "missing-order_id",
        "null-amount_cents",
        "mistyped-amount_cents-string",
        "mistyped-amount_cents-fraction",
        "mistyped-event_time-impossible-date",
        "mistyped-event_id-not-uuid",
        "invalid-event_type-unknown",
        "invalid-currency-lower-case",
        "invalid-schema_version-2",
        "invalid-amount_cents-zero",
    }
    good = [Case(f"produced-{i}", e.value, None, key=e.key) for i, e in enumerate(produced)]
    good += [
        Case("valid-null-key-no-headers", event(), None, key=None),
        Case("valid-with-headers", event(), None, headers=HEADERS),
    ]
    bad = [c for c in ALL_CASES if c.id in bad_ids]
    bad += [
        Case("bad-null-key-no-headers", b"{}", "missing field: event_id", key=None),
        Case("bad-oversized-no-headers", b"\xff" * 513, "oversized", key=None),
    ]
    # Interleave valid and bad rows across partitions, as a real batch would be.
    cases = [c for pair in zip_longest(good, bad) for c in pair if c is not None]
    assert (len(good), len(bad), len(cases)) == (22, 18, 40)
    df = records(spark, [_record(i, c) for i, c in enumerate(cases)])
    result = transform_orders(df, **ARGS)

    # One job for both outputs: tag each row with where it went.
    tagged = result.valid.select(
        "kafka_partition",
        "kafka_offset",
        F.lit("valid").alias("outcome"),
        F.lit(None).cast("string").alias("error"),
    ).unionByName(
        result.rejected.select("kafka_partition", "kafka_offset", F.lit("rejected").alias("outcome"), "error")
    )
    rows = tagged.collect()

    seen = Counter((r.kafka_partition, r.kafka_offset) for r in rows)
    expected = {_coords(i) for i in range(len(cases))}
    valid_rows = [r for r in rows if r.outcome == "valid"]
    rejected_rows = [r for r in rows if r.outcome == "rejected"]
    assert len(valid_rows) + len(rejected_rows) == len(cases)
    assert set(seen) == expected, "lost or invented rows"
    assert max(seen.values()) == 1, "duplicated rows"
    by_coords = {(r.kafka_partition, r.kafka_offset): r for r in rows}
    for i, case in enumerate(cases):
        row = by_coords[_coords(i)]
        if case.expected is None:
            assert row.outcome == "valid", (case.id, row.error)
        else:
            assert row.outcome == "rejected" and row.error.startswith(case.expected), (case.id, row.error)
    assert len(valid_rows) == len(good)


def test_output_schemas_match_the_declared_columns(spark: SparkSession) -> None:
    assert VALID_COLUMNS == [
        ("kafka_topic", "string"),
        ("kafka_partition", "int"),
        ("kafka_offset", "bigint"),
        ("kafka_timestamp", "timestamp"),
        ("kafka_key", "string"),
        ("kafka_headers", "string"),
        ("event_id", "string"),
        ("event_type", "string"),
        ("event_time", "timestamp"),
        ("order_id", "string"),
        ("customer_id", "string"),
        ("amount_cents", "bigint"),
        ("currency", "string"),
        ("schema_version", "int"),
        ("batch_id", "string"),
        ("transform_version", "string"),
        ("declaration_version", "int"),
    ]
    assert _spark_columns(REJECTED_COLUMNS) == [
        ("pipeline", "string"),
        ("kafka_topic", "string"),
        ("kafka_partition", "int"),
        ("kafka_offset", "bigint"),
        ("kafka_timestamp", "timestamp"),
        ("raw_key", "binary"),
        ("raw_value", "binary"),
        ("error", "string"),
        ("batch_id", "string"),
    ]
    result = transform_orders(records(spark, []), **ARGS)

    def columns(df: DataFrame) -> list[tuple[str, str]]:
        return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]

    assert columns(result.valid) == VALID_COLUMNS
    assert columns(result.rejected) == _spark_columns(REJECTED_COLUMNS)


def test_transform_starts_no_spark_job(spark: SparkSession) -> None:
    sc = spark.sparkContext
    df = records(spark, [_record(i, c) for i, c in enumerate(ALL_CASES)])
    group = "test-transform-starts-no-spark-job"

    def jobs_in_group() -> list[int]:
        # The status tracker is fed by the asynchronous listener bus: let it catch up first.
        sc._jsc.sc().listenerBus().waitUntilEmpty(10_000)
        return list(sc.statusTracker().getJobIdsForGroup(group))

    sc.setJobGroup(group, "transform_orders must only build a plan")
    try:
        result = transform_orders(df, **ARGS)
        _ = (result.valid.schema, result.rejected.schema)  # analysis is not a job either
        assert jobs_in_group() == []
        result.rejected.limit(1).collect()  # control: the same check does see a job
        assert jobs_in_group() != []
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


def test_max_value_bytes_must_be_positive(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="max_value_bytes"):
        transform_orders(records(spark, []), **{**ARGS, "max_value_bytes": 0})


def test_a_kafka_timestamp_outside_years_1_to_9999_is_the_first_error_and_is_not_kept(
    spark: SparkSession,
) -> None:
    # (case, Kafka's timestamp in microseconds, the side it is out on; None: kept)
    cases = [
        # Nanoseconds: beyond what microseconds in 64 bits count (Spark's Kafka source failed on it).
        (Case("ts-in-nanoseconds", event(), None), 1_767_225_600_123_456_789_000, "after 9999-12-31"),
        (Case("ts-year-10000", event(), None), 253_402_300_800_000_000, "after 9999-12-31"),
        (Case("ts-in-microseconds", b"{}", None), 1_767_225_600_123_456_000, "after 9999-12-31"),
        (Case("ts-year-0", event(), None, key=b"\x00"), -62_135_596_800_000_001, "before 0001-01-01"),
        (Case("ts-last", event(), None), 253_402_300_799_999_999, None),
        (Case("ts-first", event(), None), -62_135_596_800_000_000, None),
    ]
    rows = []
    for i, (case, micros, _) in enumerate(cases):  # Python's datetime cannot hold most of these
        key, value, topic, partition, offset, _, headers = _record(i, case)
        rows.append((key, value, topic, partition, offset, micros // 1000, headers))  # Kafka's ms
    df = records(spark, rows)
    checked = transform_orders(df, **ARGS).checked.select(
        "kafka_offset", "error", "event_id", F.unix_micros("kafka_timestamp").alias("micros")
    )
    by_offset = {r.kafka_offset: r for r in checked.collect()}
    for i, (_, micros, side) in enumerate(cases):
        row = by_offset[_coords(i)[1]]
        if side is None:
            assert (row.error, row.event_id, row.micros) == (None, EVENT_ID, micros // 1000 * 1000)
            continue
        # The timestamp's reason, whatever else is wrong with the record (check 1), and no timestamp.
        assert row.error == (
            f"invalid timestamp: {micros // 1000} ms since 1970-01-01 is {side} in UTC "
            "(kafka_timestamp is NULL)"
        )
        assert (row.event_id, row.micros) == (None, None)
        assert _named_field(row.error) is None
