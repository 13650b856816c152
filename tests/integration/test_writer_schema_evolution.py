"""A topic whose writer schema evolves mid-range (issue 47; docs/DESIGN.md, "Declarations that evolve").

The producer's writer schema evolves under the registry's BACKWARD rule (Avro: `int` promoted to `long` and
an optional field added; Protobuf: an optional field added, its quantity an int64 all along) and its
quantities outgrow 32 bits; the declaration widens the column from integer to bigint. (Protobuf's int32 to
int64, compatible on the wire and in Confluent's registry, is refused as not BACKWARD-compatible by the
stack's registry, Apicurio, with HTTP 409: so it is not what this test registers.) Records of both writer
schemas, interleaved in one range, land; a replay across the evolution gives the same rows; the invariants
hold throughout.
"""

from __future__ import annotations

import dataclasses
import uuid

import fastavro
import pytest

from eosflow.schema.avro import SchemaRegistry, encode
from eosflow.schema.protobuf_wire import header
from tests.integration.test_declared_pipeline import _produce
from tests.integration.test_text_formats import declare

pytestmark = pytest.mark.integration

BIG = 2**40  # a quantity no 32-bit field, and no integer column, holds


def _columns(qty: str) -> list[dict]:
    return [
        {"name": "id", "type": "text", "required": True},
        {"name": "qty", "type": qty, "required": True},
    ]


def _evolve_and_replay(case, first: list[bytes], mixed: list[bytes]) -> None:
    """`first` under the integer declaration, then `mixed` (both writer schemas) under bigint, then a
    replay of everything; every record lands once with its quantity."""
    _produce(case.settings.bootstrap_servers, case.topic, [(None, v) for v in first])  # 2 partitions
    assert case.ingest().outcome == "committed"
    case.write_config(columns=_columns("bigint"))
    _produce(case.settings.bootstrap_servers, case.topic, [(None, v) for v in mixed])
    summary = case.ingest()
    assert summary.outcome == "committed" and case.rejected() == []
    expected = sorted([("a", 1), ("b", 2), ("c", BIG), ("d", 3), ("e", 4)])
    assert sorted(case.query(f"select id, qty from {case.table}")) == expected
    assert case.column_types()["qty"] == "bigint"
    assert case.violations() == []

    case.replay_all()
    assert sorted(case.query(f"select id, qty from {case.table}")) == expected
    assert case.violations() == []


AVRO_V1 = {
    "type": "record",
    "name": "Line",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}],
}
# BACKWARD-compatible: int promoted to long, an optional field added with its default.
AVRO_V2 = {
    **AVRO_V1,
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "qty", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def test_an_avro_field_promoted_from_int_to_long_lands_under_a_widened_declaration(case, schema_registry):
    declare(case, format="avro", columns=_columns("integer"), business_key=None)
    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    registry = SchemaRegistry(schema_registry)
    v1 = registry.register(f"{case.topic}-value", AVRO_V1)
    v2 = registry.register(f"{case.topic}-value", AVRO_V2)
    p1, p2 = fastavro.parse_schema(AVRO_V1), fastavro.parse_schema(AVRO_V2)
    first = [encode(v1, p1, {"id": "a", "qty": 1}), encode(v1, p1, {"id": "b", "qty": 2})]
    mixed = [
        encode(v2, p2, {"id": "c", "qty": BIG, "note": "v2"}),
        encode(v1, p1, {"id": "d", "qty": 3}),  # a producer still on v1, mid-range
        encode(v2, p2, {"id": "e", "qty": 4, "note": None}),
    ]
    _evolve_and_replay(case, first, mixed)


PROTO_V1 = 'syntax = "proto3";\npackage evo;\nmessage Line {\n  string id = 1;\n  int64 qty = 2;\n}\n'
PROTO_V2 = (
    'syntax = "proto3";\npackage evo;\nmessage Line {\n  string id = 1;\n  int64 qty = 2;\n'
    "  optional string note = 3;\n}\n"
)


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint (not the zigzag one of Confluent's message-index array)."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _line(schema_id: int, id_: str, qty: int, note: str | None = None) -> bytes:
    """A Line message by hand, as any Protobuf writer encodes it: field 1 a string, 2 a varint, 3 a
    string (absent in v1's messages, and in v2's when unset)."""
    body = b"\x0a" + _varint(len(id_)) + id_.encode() + b"\x10" + _varint(qty)
    if note is not None:
        body += b"\x1a" + _varint(len(note)) + note.encode()
    return header(schema_id) + body


def test_a_protobuf_writer_schema_gaining_a_field_lands_under_a_widened_declaration(case, schema_registry):
    declare(case, format="protobuf", columns=_columns("integer"), business_key=None)
    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    registry = SchemaRegistry(schema_registry)
    subject = f"evo-{uuid.uuid4().hex[:10]}-value"
    v1 = registry.register_text(subject, PROTO_V1, "PROTOBUF")
    v2 = registry.register_text(subject, PROTO_V2, "PROTOBUF")
    assert v1 != v2
    first = [_line(v1, "a", 1), _line(v1, "b", 2)]
    mixed = [_line(v2, "c", BIG, "v2"), _line(v1, "d", 3), _line(v2, "e", 4)]
    _evolve_and_replay(case, first, mixed)
