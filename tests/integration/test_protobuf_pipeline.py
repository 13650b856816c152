"""A Protobuf topic written by confluent-kafka's own ProtobufSerializer, declared in pipelines.yml alone:
each record lands typed exactly as written, each malformed one (a wrong magic byte, an unknown schema
id, a truncated message, a wrong message index) is a rejected row with its reason, and I1-I6 hold."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from eosflow.schema.protobuf_wire import header, split
from tests.integration.test_declared_pipeline import _produce
from tests.integration.test_protobuf_registry import serialize
from tests.integration.test_text_formats import declare
from tests.protobuf_reader import message_class
from tests.unit.schema.test_protobuf_decode import Order, full_order

pytestmark = pytest.mark.integration

COLUMNS = [
    {"name": "id", "type": "bigint", "required": True},
    {"name": "customer", "type": "text", "required": True},
    {"name": "total", "type": "numeric(12,2)"},
    {"name": "paid", "type": "boolean"},
    {"name": "blob", "type": "bytea"},
    {"name": "status", "type": "text", "enum": ["STATUS_UNKNOWN", "ACTIVE", "CLOSED"]},
    {"name": "tags", "type": "text[]"},
    {"name": "placed_at", "type": "timestamptz"},
    {"name": "note", "type": "text"},  # a StringValue wrapper: absent is NULL
    {"name": "city", "type": "text", "source": "$.ship_to.city"},  # a message of another file
    {"name": "first_qty", "type": "integer", "source": "$.lines[0].qty"},
    {"name": "voucher", "type": "bigint"},  # a oneof member: only the one set appears
    {"name": "attrs", "type": "jsonb"},
    {"name": "value_schema_id", "type": "bigint", "source": "@schema_id"},
]


def test_a_protobuf_topic_lands_typed_from_its_declaration_and_its_writer_schemas(case, schema_registry):
    declare(case, format="protobuf", columns=COLUMNS)
    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    prefix = f"pbtest-{uuid.uuid4().hex[:10]}"
    full = serialize(schema_registry, full_order(), prefix)
    bare = serialize(schema_registry, Order(id=2, customer="b", card="4242"), prefix)
    schema_id, _, body = split(full)
    poison = [
        (b'{"id": 3}', "not Protobuf: no Confluent wire-format header"),
        (header(2**31 - 9) + bytes(body), "not Protobuf: unknown schema id"),
        (full[:-3], f"not Protobuf: does not decode with schema id {schema_id}"),
        (header(schema_id, (1,)) + bytes(body), "not Protobuf: unknown fields in a pbtest.Other message"),
        (header(schema_id, (7,)) + bytes(body), "not Protobuf: message indexes [7] outside schema id"),
        (serialize(schema_registry, Order(id=5, customer=""), prefix), None),  # proto3 "" is a value
    ]
    _produce(
        case.settings.bootstrap_servers,
        case.topic,
        [(None, full), (None, bare)] + [(None, v) for v, _ in poison],
    )

    summary = case.ingest()

    assert summary.outcome == "committed" and case.violations() == []
    rows = case.query(
        "select id, customer, total, paid, blob, status, tags, placed_at, note, city, first_qty, voucher, "
        f"attrs, value_schema_id from {case.table} order by id"
    )
    assert rows[0] == (
        -(2**63),
        "Zoë",
        Decimal("12.50"),
        True,
        b"\x00\xff",
        "CLOSED",
        ["a", "b"],
        datetime(2026, 3, 1, 12, 34, 56, 789000, tzinfo=UTC),
        "n",
        "Gent",
        3,
        5,
        {"a": 1.0, "b": [True, None, "s"], "c": {"d": 1.5}},
        schema_id,
    )
    # Defaults of fields without presence are values; unset fields with presence are NULL.
    assert rows[1] == (
        2,
        "b",
        Decimal("0.00"),
        False,
        b"",
        "STATUS_UNKNOWN",
        [],
        None,
        None,
        None,
        None,
        None,
        None,
        schema_id,
    )
    assert rows[2][:2] == (5, "")
    rejected = sorted(e for _, _, e, _ in case.rejected())
    expected = sorted(reason for _, reason in poison if reason is not None)
    assert len(rejected) == len(expected)
    for got, want in zip(rejected, expected, strict=True):
        assert got.startswith(want), (got, want)


def test_a_json_topic_into_a_kafka_sink_comes_out_as_protobuf_a_consumer_reads_with_the_registry_alone(
    case, schema_registry
):
    from eosflow.schema.avro import SchemaRegistry
    from eosflow.verify import verify_pipeline
    from tests.kafka_reader import read_all, sources

    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    case.as_kafka_sink(output_format="protobuf")
    manifest = case.produce(40, seed=30, partitions=2)

    assert case.ingest().outcome == "committed"

    out = read_all(case.settings, case.output_topic)
    assert len(out) == len(manifest.visible()) == 40 and set(sources(out).values()) == {1}
    schema_id, indexes, _ = split(out[0].value())
    answer = SchemaRegistry(schema_registry).get_json(f"/schemas/ids/{schema_id}")
    assert answer["schemaType"] == "PROTOBUF"
    cls = message_class(answer["schema"])  # a consumer's view: the registry and protobuf's runtime
    messages = [cls.FromString(bytes(split(m.value())[2])) for m in out]
    assert {m.event_id for m in messages} == {a.event_id for a in manifest.visible()}
    assert indexes == (0,) and all(m.HasField("event_time") for m in messages)
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
