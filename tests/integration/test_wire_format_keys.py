"""Keys written by Confluent's serializers (`key_format`): an Avro long or record key, a Protobuf message
key, each decoded with the registry's key subject into a typed kafka_key; a key that is not in the
format is a rejected row, its bytes kept."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.integration.test_declared_pipeline import _produce
from tests.integration.test_protobuf_registry import serializer
from tests.integration.test_text_formats import declare
from tests.unit.schema.test_protobuf_decode import Other

pytestmark = pytest.mark.integration

COLUMNS = [{"name": "id", "type": "text", "required": True}]


def avro_keys(registry, topic: str, schema: dict, keys: list) -> list[bytes]:
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(schema))
    return [serialize(k, SerializationContext(topic, MessageField.KEY)) for k in keys]


def value(i: int) -> bytes:
    return json.dumps({"id": f"r{i}"}).encode()


def test_an_avro_long_key_is_a_bigint_kafka_key(case, schema_registry):
    declare(case, key="bigint", key_format="avro", columns=COLUMNS)
    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    keys = avro_keys(schema_registry, case.topic, {"type": "long"}, [-(2**63), 0, 42])
    records = [(k, value(i)) for i, k in enumerate(keys)] + [(b"42", value(9)), (None, value(10))]
    _produce(case.settings.bootstrap_servers, case.topic, records)

    assert case.ingest().outcome == "committed" and case.violations() == []
    assert case.column_types()["kafka_key"] == "bigint"
    rows = case.query(f"select id, kafka_key from {case.table} order by id")
    assert rows == [("r0", -(2**63)), ("r1", 0), ("r10", None), ("r2", 42)]
    ((error, raw),) = [(e, bytes(v)) for _, _, e, v in case.rejected()]
    assert error.startswith("mistyped key (not Avro: no Confluent wire-format header")
    assert raw == value(9)  # and raw_key keeps b"42": checked through the rejected table below
    assert case.query("select raw_key from eosflow.rejected where pipeline = %s", case.name) == [(b"42",)]


def test_an_avro_record_key_is_jsonb(case, schema_registry):
    declare(case, key="jsonb", key_format="avro", columns=COLUMNS)
    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    schema = {
        "type": "record",
        "name": "Key",
        "fields": [{"name": "tenant", "type": "string"}, {"name": "n", "type": "int"}],
    }
    keys = avro_keys(schema_registry, case.topic, schema, [{"tenant": "a", "n": 1}])
    _produce(case.settings.bootstrap_servers, case.topic, [(keys[0], value(1))])

    assert case.ingest().outcome == "committed" and case.violations() == []
    assert case.query(f"select kafka_key from {case.table}") == [({"tenant": "a", "n": 1},)]


def test_a_protobuf_message_key_is_jsonb(case, schema_registry):
    declare(case, key="jsonb", key_format="protobuf", columns=COLUMNS)
    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    serialize = serializer(schema_registry, Other, f"pbtest-{case.name}")
    key = serialize(Other(name="k"), SerializationContext(case.topic, MessageField.KEY))
    _produce(case.settings.bootstrap_servers, case.topic, [(key, value(2)), (b"\x00\x00", value(3))])

    assert case.ingest().outcome == "committed" and case.violations() == []
    assert case.query(f"select kafka_key from {case.table}") == [({"name": "k"},)]
    ((error,),) = case.query("select error from eosflow.rejected where pipeline = %s", case.name)
    assert error.startswith("mistyped key (not Protobuf: no Confluent wire-format header")


def test_avro_keys_and_values_from_confluents_avro_serializer_land_typed(case, schema_registry):
    """Both halves of a record written by confluent-kafka's AvroSerializer, as a Python producer writes."""
    declare(
        case,
        format="avro",
        key="text",
        key_format="avro",
        columns=[
            {"name": "id", "type": "text", "required": True},
            {"name": "at", "type": "timestamptz", "required": True},
            {"name": "amount", "type": "numeric(10,2)"},
            {"name": "value_schema_id", "type": "integer", "source": "@schema_id"},
        ],
    )
    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    schema = {
        "type": "record",
        "name": "Payment",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {
                "name": "amount",
                "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}],
            },
        ],
    }
    serialize = AvroSerializer(SchemaRegistryClient({"url": schema_registry.url}), json.dumps(schema))
    at = datetime(2026, 3, 1, 10, 0, 0, 123000, tzinfo=UTC)
    values = [
        serialize(
            {"id": f"p{i}", "at": at, "amount": Decimal("12.50")},
            SerializationContext(case.topic, MessageField.VALUE),
        )
        for i in range(3)
    ]
    keys = avro_keys(schema_registry, case.topic, {"type": "string"}, ["k0", "k1", "k2"])
    _produce(case.settings.bootstrap_servers, case.topic, list(zip(keys, values, strict=True)))

    assert case.ingest().outcome == "committed" and case.violations() == []
    rows = case.query(f"select kafka_key, id, at, amount, value_schema_id from {case.table} order by id")
    schema_id = int.from_bytes(values[0][1:5], "big")
    assert rows == [(f"k{i}", f"p{i}", at, Decimal("12.50"), schema_id) for i in range(3)]
