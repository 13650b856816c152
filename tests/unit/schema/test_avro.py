"""Avro values (Confluent wire format) through the declared checks, against a stand-in registry.

The stand-in speaks the registry's REST API over real HTTP (tests/registry_standin.py); the Spark
path and the real registry are in tests/integration/test_avro_pipeline.py.
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest
from pyspark import cloudpickle

from eosflow.schema.avro import (
    NO_HEADER,
    RegistryAuthenticationError,
    RegistryConfig,
    RegistryUnavailableError,
    SchemaRegistry,
    encode,
    json_like,
)
from eosflow.schema.declaration import DeclarationError, parse_schema
from eosflow.schema.record import RecordCheck, key_check
from eosflow.schema.types import parse_type
from eosflow.transform import BatchCheck
from tests.avro_clicks import DECLARATION, WRITER, click
from tests.registry_standin import StandinRegistry

COLUMNS = DECLARATION
SCHEMA = parse_schema(COLUMNS, "test")
NAMES = [c.name for c in SCHEMA.columns]


@pytest.fixture
def registry():
    r = StandinRegistry()
    yield r
    r.close()


@pytest.fixture
def writer_id(registry) -> int:
    return registry.add("clicks-value", {"schema": json.dumps(WRITER)})


def check_for(registry: StandinRegistry, schema=SCHEMA) -> RecordCheck:
    return RecordCheck(schema, 4096, RegistryConfig(registry.url))


def value(schema_id: int, record: dict, writer: dict = WRITER) -> bytes:
    return encode(schema_id, fastavro.parse_schema(writer), record)


def test_an_avro_record_lands_in_its_declared_columns_typed_as_written(registry, writer_id):
    error, typed = check_for(registry)(value(writer_id, click(7)))
    assert error is None
    assert dict(zip(NAMES, typed, strict=True)) == {
        "click_id": str(uuid.UUID(int=7)),
        "url": "https://shop.example/p/7",
        "ts": datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC),
        "customer": "c-7",
        "n_items": 7,
        "price": Decimal("9999999999.99"),
        "kind": "buy",
        "tags": ["sale", 'say "hi"', "{braces}"],
        "attrs": {"w": 1.5},
        "ok": True,
        "day": date(2026, 2, 28),
        "score": -0.125,
    }


def test_the_writer_schema_is_fetched_once_per_id_not_per_record(registry, writer_id):
    check = check_for(registry)
    for i in range(50):
        assert check(value(writer_id, click(i)))[0] is None
    assert registry.requests == [f"/schemas/ids/{writer_id}"]


def test_records_of_two_writer_schemas_decode_each_with_its_own(registry, writer_id):
    # Schema evolution upstream: v2 drops the optional customer and adds a field nobody declared.
    v2 = {**WRITER, "fields": [f for f in WRITER["fields"] if f["name"] != "customer"]}
    v2["fields"] = v2["fields"] + [{"name": "extra", "type": "string", "default": ""}]
    v2_id = registry.add("clicks-value", {"schema": json.dumps(v2)})
    check = check_for(registry)
    record = {k: v for k, v in click(2).items() if k != "customer"} | {"extra": "x"}
    error, typed = check(value(v2_id, record, v2))
    assert error is None and typed[NAMES.index("customer")] is None
    assert check(value(writer_id, click(3)))[1][NAMES.index("customer")] == "c-3"


def test_a_schema_with_references_decodes_with_the_referenced_types(registry):
    money = {
        "type": "record",
        "name": "Money",
        "namespace": "shop",
        "fields": [{"name": "cents", "type": "long"}, {"name": "currency", "type": "string"}],
    }
    registry.add("money", {"schema": json.dumps(money)})
    order = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "total", "type": "shop.Money"}],
    }
    order_id = registry.add(
        "orders-value",
        {
            "schema": json.dumps(order),
            "references": [{"name": "shop.Money", "subject": "money", "version": 1}],
        },
    )
    schema = parse_schema(
        {
            "format": "avro",
            "columns": [
                {"name": "id", "type": "bigint", "required": True},
                {"name": "cents", "type": "bigint", "source": "$.total.cents"},
            ],
        },
        "t",
    )
    named: dict = {}
    fastavro.parse_schema(money, named_schemas=named)
    raw = encode(
        order_id,
        fastavro.parse_schema(order, named_schemas=named),
        {"id": 5, "total": {"cents": 250, "currency": "EUR"}},
    )
    assert check_for(registry, schema)(raw) == (None, [5, 250])


def _truncated(writer_id: int) -> bytes:
    return value(writer_id, click())[:-3]


# (what is wrong, the value made from the writer's schema id, the reason's beginning)
POISON = [
    ("a JSON value", lambda sid: b'{"click_id": "x"}', NO_HEADER),
    ("shorter than a header", lambda sid: b"\x00\x00", NO_HEADER),
    (
        "an id the registry lacks",
        lambda sid: value(sid, click())[:1] + (999).to_bytes(4, "big") + b"\x02",
        "not Avro: unknown schema id 999 (the schema registry has no such schema)",
    ),
    ("truncated", _truncated, "not Avro: does not decode with schema id"),
    (
        "bytes after the record",
        lambda sid: value(sid, click()) + b"\x00",
        "not Avro: 1 bytes after the record",
    ),
    (
        "pattern",
        lambda sid: value(sid, click(url="ftp://x")),
        "invalid value: url (does not match ^https?://)",
    ),
    ("nul in a string", lambda sid: value(sid, click(url="https://\x00")), "invalid value: url (holds a NUL"),
    ("min", lambda sid: value(sid, click(n_items=-1)), "invalid value: n_items (must be >= 0, got -1)"),
    (
        "NaN in jsonb",
        lambda sid: value(sid, click(attrs={"w": float("nan")})),
        "invalid value: attrs (holds nan, which JSON cannot carry)",
    ),
    (
        "infinity in jsonb",
        lambda sid: value(sid, click(attrs={"w": float("inf")})),
        "invalid value: attrs (holds inf, which JSON cannot carry)",
    ),
]


@pytest.mark.parametrize(("what", "make", "reason"), POISON, ids=[p[0] for p in POISON])
def test_a_bad_avro_record_is_a_rejected_row_with_its_reason(registry, writer_id, what, make, reason):
    error, typed = check_for(registry)(make(writer_id))
    assert typed is None and error is not None and error.startswith(reason), (what, error)


def test_a_schema_that_is_not_avro_or_not_a_record_rejects_its_records(registry):
    proto = registry.add("p", {"schema": 'syntax = "proto3";', "schemaType": "PROTOBUF"})
    plain = registry.add("s", {"schema": json.dumps("string")})
    check = check_for(registry)
    assert (
        check(b"\x00" + proto.to_bytes(4, "big") + b"\x02a")[0]
        == f"not Avro: schema id {proto} is a PROTOBUF schema"
    )
    assert check(encode(plain, fastavro.parse_schema("string"), "hi"))[0] == (
        f"not Avro: schema id {plain} is not a record schema"
    )


def test_avro_values_a_column_type_does_not_take_are_mistyped(registry):
    writer = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "blob", "type": "bytes"},
            {"name": "f", "type": "double"},
        ],
    }
    sid = registry.add("r", {"schema": json.dumps(writer)})
    record = {"id": 1, "local": datetime(2026, 1, 1), "blob": b"\x00", "f": float("nan")}
    raw = encode(sid, fastavro.parse_schema(writer), record)

    def first_error(columns: list[dict]) -> str | None:
        schema = parse_schema({"format": "avro", "columns": columns}, "t")
        return check_for(registry, schema)(raw)[0]

    assert first_error([{"name": "id", "type": "text"}]) == "mistyped field: id (expected string)"
    # A local timestamp has no zone: no instant can be made of it, as of a JSON string without one.
    assert first_error([{"name": "local", "type": "timestamptz"}]).startswith("mistyped field: local")
    assert first_error([{"name": "blob", "type": "text"}]) == "mistyped field: blob (expected string)"
    assert first_error([{"name": "blob", "type": "jsonb"}]) == (
        "invalid value: blob (holds bytes, which JSON cannot carry)"
    )
    assert first_error([{"name": "f", "type": "numeric(10,2)"}]) == "mistyped field: f (expected number)"
    assert first_error([{"name": "f", "type": "double"}]) is None  # double precision stores NaN


def test_a_registry_that_cannot_answer_stops_the_run_instead_of_rejecting_records(registry, writer_id):
    registry.fail_with = 503
    with pytest.raises(RegistryUnavailableError, match="could not reach the schema registry .*HTTP 503"):
        check_for(registry)(value(writer_id, click()))
    registry.fail_with = 401
    with pytest.raises(RegistryAuthenticationError, match="refused the credentials"):
        check_for(registry)(value(writer_id, click()))
    gone = RecordCheck(SCHEMA, 4096, RegistryConfig("http://127.0.0.1:1"))
    with pytest.raises(RegistryUnavailableError, match="http://127.0.0.1:1"):
        gone(value(writer_id, click()))


def test_basic_auth_is_sent_when_configured(registry):
    config = RegistryConfig(registry.url, (("basic.auth.user.info", "me:s3cret pass"),))
    assert SchemaRegistry(config)._headers()["Authorization"] == "Basic bWU6czNjcmV0IHBhc3M="


def test_registry_settings_are_checked_when_read():
    with pytest.raises(ValueError, match="must be http"):
        RegistryConfig("localhost:8081")
    with pytest.raises(ValueError, match=r"unknown; known"):
        RegistryConfig("http://x:1", (("basic.auth", "a:b"),))


def test_the_avro_check_survives_the_trip_to_a_spark_worker(registry, writer_id):
    check = cloudpickle.loads(cloudpickle.dumps(check_for(registry)))
    assert check(value(writer_id, click()))[0] is None


def test_an_avro_pipeline_without_a_registry_is_refused():
    with pytest.raises(ValueError, match="EOSFLOW_SCHEMA_REGISTRY_URL"):
        RecordCheck(SCHEMA, 4096)


def test_json_like_gives_the_text_forms_json_parsing_would():
    assert json_like({"a": [datetime(2026, 1, 1, tzinfo=UTC), date(2026, 1, 2), uuid.UUID(int=1)]}) == {
        "a": ["2026-01-01T00:00:00Z", "2026-01-02", "00000000-0000-0000-0000-000000000001"]
    }
    assert json_like(datetime(2026, 1, 1)) == "2026-01-01T00:00:00"  # no zone invented


# -- typed keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "key", "expected"),
    [
        ("bigint", b"12", (None, 12)),
        ("bigint", b" -7 ", (None, -7)),
        ("bigint", b"12.0", ("mistyped key (expected 64-bit integer)", None)),
        ("bigint", b"abc", ("mistyped key (expected 64-bit integer)", None)),
        ("bigint", b"9223372036854775808", ("mistyped key (expected 64-bit integer)", None)),
        ("integer", b"null", ("mistyped key (expected 32-bit integer)", None)),
        ("uuid", b"00000000-0000-0000-0000-000000000001", (None, "00000000-0000-0000-0000-000000000001")),
        (
            "uuid",
            b'"00000000-0000-0000-0000-000000000001"',
            ("mistyped key (expected lower-case canonical UUID string)", None),
        ),
        ("numeric(5,2)", b"1.25", (None, Decimal("1.25"))),
        ("numeric(5,2)", b"1.255", ("invalid key (more than 2 decimal places, got 1.255)", None)),
        ("double", b"0.1", (None, 0.1)),
        ("boolean", b"true", (None, True)),
        ("date", b"2026-02-30", ("mistyped key (expected date string YYYY-MM-DD)", None)),
        ("timestamptz", b"2026-01-01T00:00:00Z", (None, datetime(2026, 1, 1, tzinfo=UTC))),
        (
            "jsonb",
            b'{"a": [1, "\\u0000"]}',
            ("invalid key (holds a NUL character, which Postgres jsonb cannot store)", None),
        ),
        ("jsonb", b'{"a": 1}', (None, {"a": 1})),
        ("text", b"\xff", ("mistyped key (not UTF-8)", None)),
        ("bigint", None, (None, None)),
    ],
)
def test_a_typed_key_is_read_from_its_text_form(declared, key, expected):
    assert key_check(parse_type(declared))(key) == expected


def test_a_declaration_may_type_its_key_but_not_as_an_array():
    assert parse_schema(
        {"key": "bigint", "columns": [{"name": "a", "type": "text"}]}, "t"
    ).key_type.postgres == ("bigint")
    with pytest.raises(DeclarationError, match="key 'text\\[\\]' unknown"):
        parse_schema({"key": "text[]", "columns": [{"name": "a", "type": "text"}]}, "t")
    with pytest.raises(DeclarationError, match="key 'long' unknown"):
        parse_schema({"key": "long", "columns": [{"name": "a", "type": "text"}]}, "t")


def test_a_batch_with_a_typed_key_rejects_a_valid_record_whose_key_is_not_of_the_type(registry, writer_id):
    schema = parse_schema({**COLUMNS, "key": "bigint"}, "t")
    raw = value(writer_id, click())
    batch = pa.RecordBatch.from_pydict(
        {
            "key": [b"41", b"x", None],
            "value": [raw, raw, raw],
            "topic": ["t"] * 3,
            "partition": [0] * 3,
            "offset": [0, 1, 2],
            "timestamp": pa.array([0, 0, 0], pa.timestamp("us", tz="UTC")),
            "kafka_headers": ["[]"] * 3,
        }
    )
    checked = BatchCheck("p", "b", "v", 4096, schema, registry=RegistryConfig(registry.url))(batch)
    assert checked.column("kafka_key").type == pa.int64()
    assert checked.column("kafka_key").to_pylist() == [41, None, None]
    assert checked.column("error").to_pylist() == [None, "mistyped key (expected 64-bit integer)", None]
    assert checked.column("raw_key").to_pylist()[1] == b"x"


def test_encode_writes_the_confluent_wire_format():
    parsed = fastavro.parse_schema({"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]})
    raw = encode(258, parsed, {"a": 1})
    assert raw[:5] == b"\x00\x00\x00\x01\x02"
    assert fastavro.schemaless_reader(io.BytesIO(raw[5:]), parsed, None) == {"a": 1}


def test_an_avro_pipeline_with_a_python_transform_is_refused_naming_both():
    with pytest.raises(DeclarationError, match="format 'avro' would never be read"):
        parse_schema({**COLUMNS, "transform": "pkg.mod:fn", "business_key": None}, "t")
