"""`format: text`, `format: bytes` and JSON in Confluent's wire format, without Spark: what each value
becomes, and what a declaration for them may not say."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from eosflow.schema.declaration import DeclarationError, parse_schema
from eosflow.schema.record import NO_SCHEMA_ID, RecordCheck
from eosflow.schema.text import NOT_MATCHING
from eosflow.transform import BatchCheck

LOG = {
    "format": "text",
    "text_pattern": r"(?P<at>\S+) (?P<level>[A-Z]+) (?P<status>\d+)?(?: (?P<message>.*))?",
    "columns": [
        {"name": "at", "type": "timestamptz", "required": True},
        {"name": "level", "type": "text", "required": True, "enum": ["INFO", "WARN"]},
        {"name": "status", "type": "integer"},
        {"name": "message", "type": "text"},
    ],
}


def check(spec: dict, value: bytes | None, compiled: bool = True) -> tuple[str | None, list | None]:
    return RecordCheck(parse_schema(spec, "test"), 4096, compiled=compiled)(value)


def test_a_plain_text_value_lands_whole_in_its_one_column():
    spec = {"format": "text", "columns": [{"name": "line", "type": "text", "required": True}]}
    assert check(spec, b"a line, with {braces} and 17") == (None, ["a line, with {braces} and 17"])
    assert check(spec, b"") == (None, [""])  # an empty value is a value, not a missing one


def test_a_text_value_of_a_typed_column_is_read_as_its_spelling():
    """VerifiableProducer writes "17": under format: text a bigint column takes it."""

    def one(ctype: str, value: bytes):
        return check({"format": "text", "columns": [{"name": "v", "type": ctype, "required": True}]}, value)

    assert one("bigint", b"17") == (None, [17])
    assert one("numeric(4,2)", b" 1.50 ") == (None, [Decimal("1.50")])
    assert one("boolean", b"true") == (None, [True])
    assert one("date", b"2026-02-28") == (None, [date(2026, 2, 28)])
    assert one("bigint", b"seventeen") == ("mistyped field: v (expected 64-bit integer)", None)
    assert one("bigint", b"null") == ("mistyped field: v (expected 64-bit integer)", None)
    assert one("bigint", b"1.5") == ("mistyped field: v (expected 64-bit integer)", None)


def test_a_text_pattern_parses_a_line_into_typed_columns():
    assert check(LOG, b"2026-01-02T03:04:05Z WARN 503 upstream timed out") == (
        None,
        [datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "WARN", 503, "upstream timed out"],
    )
    # A group that took no part is missing: NULL when optional.
    assert check(LOG, b"2026-01-02T03:04:05Z INFO ") == (
        None,
        [datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "INFO", None, None],
    )


def test_a_text_value_is_rejected_with_the_reason_of_its_first_failing_check():
    assert check(LOG, b"no timestamp here") == (NOT_MATCHING, None)
    assert check(LOG, b"2026-01-02T03:04:05Z WARN 503 ok\nsecond line") == (NOT_MATCHING, None)  # whole value
    assert check(LOG, b"\xff\xfe WARN 1") == ("not UTF-8", None)
    assert check(LOG, b"yesterday WARN 1 x") == (
        "mistyped field: at (expected ISO-8601 timestamp string with zone, e.g. 2026-01-01T00:00:00Z)",
        None,
    )
    assert check(LOG, b"2026-01-02T03:04:05Z DEBUG 1 x") == (
        "invalid value: level (not one of INFO, WARN)",
        None,
    )
    assert check(LOG, b"2026-01-02T03:04:05Z INFO 99999999999 x") == (
        "mistyped field: status (expected 32-bit integer)",
        None,
    )
    assert check(LOG, None) == ("null value", None)


def test_a_bytes_value_lands_byte_for_byte_whatever_it_holds():
    spec = {"format": "bytes", "columns": [{"name": "payload", "type": "bytea", "required": True}]}
    for value in (b"\x00\xff\xfe binary", b"", "text é".encode()):
        assert check(spec, value) == (None, [value])
    assert check(spec, None) == ("null value", None)
    oversized = RecordCheck(parse_schema(spec, "t"), 4)(b"12345")
    assert oversized == ("oversized: 5 bytes > 4", None)


def test_a_bytes_value_is_a_binary_arrow_column():
    spec = {"format": "bytes", "columns": [{"name": "payload", "type": "bytea", "required": True}]}
    checker = BatchCheck("p", "b", "v1", 4096, parse_schema(spec, "t"))
    batch = pa.RecordBatch.from_pylist(
        [
            {
                "key": None,
                "value": b"\x00\xff",
                "topic": "t",
                "partition": 0,
                "offset": 5,
                "timestamp": datetime(2026, 1, 1, tzinfo=UTC),
                "kafka_headers": "[]",
            }
        ]
    )
    out = checker(batch)
    assert out.schema.field("payload").type == pa.binary()
    assert out.column("payload").to_pylist() == [b"\x00\xff"] and out.column("error").to_pylist() == [None]


@pytest.mark.parametrize("compiled", [True, False])
def test_json_in_confluents_wire_format_is_read_after_its_header(compiled: bool):
    """What confluent-kafka's JSONSerializer and the Java KafkaJsonSchemaSerializer write."""
    spec = {"columns": [{"name": "id", "type": "text", "required": True}, {"name": "n", "type": "bigint"}]}
    body = json.dumps({"id": "a", "n": 3}).encode()
    framed = b"\x00" + (7).to_bytes(4, "big") + body
    assert check(spec, framed, compiled) == check(spec, body, compiled) == (None, ["a", 3])
    assert check(spec, b"\x00\x00\x00", compiled) == (NO_SCHEMA_ID, None)
    assert check(spec, b"\x00\x00\x00\x00\x07not json", compiled) == ("not JSON", None)
    assert check(spec, b"\x00\x00\x00\x00\x07", compiled) == ("not JSON", None)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"format": "bytes", "columns": [{"name": "p", "type": "text"}]},
            "format: bytes lands each value, byte for byte, in one column of type bytea",
        ),
        (
            {"format": "text", "columns": [{"name": "a", "type": "text"}, {"name": "b", "type": "text"}]},
            "format: text without text_pattern lands each value in one column; 2 are declared",
        ),
        (
            {"format": "text", "text_pattern": "(?P<a>.*)", "columns": [{"name": "b", "type": "text"}]},
            "column(s) ['b'] have no named group in text_pattern",
        ),
        (
            {"format": "text", "text_pattern": "(?P<a>", "columns": [{"name": "a", "type": "text"}]},
            "text_pattern '(?P<a>' is not a regular expression RE2 runs: missing )",
        ),
        (
            {"format": "text", "columns": [{"name": "a", "type": "text", "source": "$.x"}]},
            "column 'a' has a source, but a text value has no fields",
        ),
        (
            {"format": "text", "columns": [{"name": "a", "type": "jsonb"}]},
            "column 'a' is jsonb; a text value fills",
        ),
        (
            {"format": "text", "columns": [{"name": "a", "type": "text[]"}]},
            "column 'a' is text[]; a text value fills",
        ),
        (
            {"text_pattern": "(?P<a>.*)", "columns": [{"name": "a", "type": "text"}]},
            "text_pattern parses format: text values; this pipeline is 'json'",
        ),
        ({"columns": [{"name": "a", "type": "bytea[]"}]}, "arrays hold scalars only (not jsonb, not bytea"),
    ],
)
def test_a_declaration_the_format_cannot_honour_is_refused(spec: dict, message: str):
    with pytest.raises(DeclarationError, match=None) as raised:
        parse_schema(spec, "test")
    assert message in str(raised.value)


def test_a_json_value_never_fills_a_bytea_column():
    spec = {"columns": [{"name": "b", "type": "bytea"}]}
    assert check(spec, b'{"b": "aGk="}') == (
        "mistyped field: b (expected bytes (format: bytes, or an Avro or Protobuf bytes field))",
        None,
    )
    assert check(spec, b"{}") == (None, [None])


def test_the_text_pattern_is_part_of_the_declaration_version():
    one = parse_schema({**LOG}, "t").canonical
    other = parse_schema({**LOG, "text_pattern": LOG["text_pattern"] + " "}, "t").canonical
    plain = parse_schema({"columns": [{"name": "a", "type": "text"}]}, "t").canonical
    assert one != other and "text_pattern" not in plain


@pytest.mark.parametrize("compiled", [True, False])
def test_a_schema_id_column_holds_the_id_of_the_values_header(compiled: bool):
    spec = {
        "columns": [
            {"name": "sid", "type": "integer", "source": "@schema_id"},
            {"name": "id", "type": "text", "required": True},
            {"name": "sid_again", "type": "bigint", "source": "@schema_id"},
        ]
    }
    body = json.dumps({"id": "a", "sid": "a field of that name is not the id"}).encode()
    assert check(spec, b"\x00" + (7).to_bytes(4, "big") + body, compiled) == (None, [7, "a", 7])
    assert check(spec, body, compiled) == (None, [None, "a", None])
    assert check(spec, b"{}", compiled) == ("missing field: id", None)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ({"type": "text"}, "a @schema_id column is an optional integer or bigint"),
        ({"type": "integer", "required": True}, "a @schema_id column is an optional integer or bigint"),
        ({"type": "integer", "min": 1}, "a @schema_id column takes no rules, got ['min']"),
    ],
)
def test_a_schema_id_column_is_an_optional_integer_without_rules(column: dict, message: str):
    with pytest.raises(DeclarationError) as raised:
        parse_schema({"columns": [{"name": "sid", "source": "@schema_id", **column}]}, "t")
    assert message in str(raised.value)
    text = {"format": "text", "columns": [{"name": "sid", "type": "integer", "source": "@schema_id"}]}
    with pytest.raises(DeclarationError, match="has a source, but a text value has no fields"):
        parse_schema(text, "t")
