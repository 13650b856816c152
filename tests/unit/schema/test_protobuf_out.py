"""A Kafka sink's Protobuf output, without a registry: the message the declaration makes, and records
read back by protobuf's own runtime from that descriptor alone (what any consumer has)."""

from __future__ import annotations

import pickle
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from eosflow.pipelines import PipelineConfigError
from eosflow.schema.declaration import parse_schema
from eosflow.schema.protobuf_out import ProtobufOutput, output_file
from eosflow.schema.protobuf_wire import split
from eosflow.sinks.kafka.sink import KafkaSink
from tests.protobuf_reader import message_class

SCHEMA = parse_schema(
    {
        "columns": [
            {"name": "id", "type": "uuid", "required": True},
            {"name": "n", "type": "bigint"},
            {"name": "small", "type": "integer"},
            {"name": "amount", "type": "numeric(12,2)"},
            {"name": "ok", "type": "boolean"},
            {"name": "at", "type": "timestamptz"},
            {"name": "day", "type": "date"},
            {"name": "doc", "type": "jsonb"},
            {"name": "tags", "type": "text[]"},
            {"name": "times", "type": "timestamptz[]"},
            {"name": "blob", "type": "bytea"},
            {"name": "score", "type": "double"},
        ]
    },
    "t",
)
ID = "0b9a4f3e-5c6d-4e7f-8a9b-0c1d2e3f4a5b"


def output() -> ProtobufOutput:
    file = output_file("my_orders", SCHEMA)
    kinds = tuple((c.type.element or c.type).declared for c in SCHEMA.columns)
    return ProtobufOutput(42, file.SerializeToString(), tuple(c.name for c in SCHEMA.columns), kinds)


def read_back(value: bytes):
    """The record as a consumer reads it: a class from the registered descriptor, by protobuf itself."""
    schema_id, indexes, body = split(value)
    assert (schema_id, indexes) == (42, (0,))
    cls = message_class(output_file("my_orders", SCHEMA))
    assert cls.DESCRIPTOR.full_name == "eosflow.output.MyOrders"
    return cls.FromString(bytes(body))


def test_every_declared_type_is_written_as_its_field_and_read_back_exactly():
    at = datetime(2026, 3, 1, 12, 34, 56, 789012, tzinfo=UTC)
    typed = [ID, -(2**63), 7, Decimal("1E+2"), False, at, date(2026, 2, 28), {"a": [1, Decimal("0.10")]}]
    typed += [["x", "y"], [at], b"\x00\xff", 0.0]
    message = read_back(pickle.loads(pickle.dumps(output()))(typed))
    assert message.id == ID and message.n == -(2**63) and message.small == 7
    assert message.amount == "100" and message.ok is False and message.HasField("ok")
    assert message.at.ToDatetime(tzinfo=UTC) == at and message.day == "2026-02-28"
    assert message.doc == '{"a":[1,0.10]}' and list(message.tags) == ["x", "y"]
    assert [t.ToDatetime(tzinfo=UTC) for t in message.times] == [at]
    assert message.blob == b"\x00\xff" and message.HasField("score") and message.score == 0.0


def test_a_null_is_an_absent_field_and_a_null_array_reads_back_empty():
    message = read_back(output()([ID] + [None] * 11))
    for name in ("n", "small", "amount", "ok", "at", "day", "doc", "blob", "score"):
        assert not message.HasField(name), name
    assert list(message.tags) == [] and list(message.times) == []


def test_field_numbers_follow_the_declared_order_and_optional_columns_have_presence():
    (message,) = output_file("my_orders", SCHEMA).message_type
    assert [(f.name, f.number) for f in message.field][:3] == [("id", 1), ("n", 2), ("small", 3)]
    assert not message.field[0].proto3_optional  # required
    assert message.field[1].proto3_optional and not message.field[8].proto3_optional  # text[]: repeated


@pytest.mark.parametrize(
    ("extra", "expected"),
    [({}, "json"), ({"output_format": "protobuf"}, "protobuf"), ({"output_format": "avro"}, "avro")],
)
def test_a_kafka_sink_declares_its_output_format(extra, expected):
    spec = {"topics": ["in"], "output_topic": "out", **extra}
    assert KafkaSink.declare(spec, SCHEMA, "p").output_format == expected


def test_an_avro_input_comes_out_as_avro_unless_declared_otherwise():
    avro = parse_schema({"format": "avro", "columns": [{"name": "a", "type": "text"}]}, "t")
    assert KafkaSink.declare({"topics": ["in"], "output_topic": "out"}, avro, "p").output_format == "avro"
    spec = {"topics": ["in"], "output_topic": "out", "output_format": "json"}
    assert KafkaSink.declare(spec, avro, "p").output_format == "json"


def test_an_unknown_output_format_is_refused():
    with pytest.raises(PipelineConfigError, match="output_format 'xml' unknown; one of"):
        KafkaSink.declare({"topics": ["in"], "output_topic": "out", "output_format": "xml"}, SCHEMA, "p")
