"""Protobuf records written by confluent-kafka's own ProtobufSerializer, decoded against the stack's registry.

The serializer registers the writer schema (base64 of a FileDescriptorProto) and its reference with
the stack's Apicurio Registry and frames each record; eosflow's decoder fetches the schema back and
gives the JSON-like dict. The same schema registered as .proto text over REST (as the Java serializer
or a person does) decodes the same bytes. The schemas are tests/unit/schema/test_protobuf_decode.py's.
"""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.common.protobuf import _create_index_array
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from eosflow.schema import protobuf
from eosflow.schema.avro import RegistryConfig, SchemaRegistry
from eosflow.schema.protobuf import ProtobufDecoder
from eosflow.schema.protobuf_wire import header, split
from tests.unit.schema.test_protobuf_decode import (
    ADDRESS,
    DEFAULTS,
    FULL,
    ORDERS,
    Line,
    Order,
    Other,
    full_order,
)

pytestmark = pytest.mark.integration  # schema_registry: the stack's, from tests/integration/conftest.py


@pytest.fixture(autouse=True)
def fresh_caches():
    """Each test fetches its writer schemas afresh (ids are the registry's, so only for clarity)."""
    protobuf._WRITERS.clear()
    protobuf._CLASSES.clear()


@pytest.fixture
def prefix() -> str:
    return f"pbtest-{uuid.uuid4().hex[:10]}"


def serializer(registry: RegistryConfig, message_type: type, prefix: str) -> ProtobufSerializer:
    client = SchemaRegistryClient({"url": registry.url})
    config = {
        "use.deprecated.format": False,
        # the reference's subject, by default its file name: made the test's own
        "reference.subject.name.strategy": lambda ctx, dependency: f"{prefix}-{dependency.name}",
    }
    return ProtobufSerializer(message_type, client, config)


def serialize(registry: RegistryConfig, message, prefix: str) -> bytes:
    context = SerializationContext(prefix, MessageField.VALUE)  # subject <prefix>-value
    return serializer(registry, type(message), prefix)(message, context)


def register_text(registry: RegistryConfig, subject: str, text: str, references: list | None = None) -> int:
    """A .proto text registered over REST, as the Java serializer or a person registers it."""
    body = json.dumps({"schemaType": "PROTOBUF", "schema": text, "references": references or []}).encode()
    request = urllib.request.Request(
        f"{registry.base}/subjects/{subject}/versions",
        data=body,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(json.loads(answer.read())["id"])


def test_records_confluent_kafkas_serializer_writes_decode_to_json_like_dicts(schema_registry, prefix):
    decoder = ProtobufDecoder(schema_registry)
    full = serialize(schema_registry, full_order(), prefix)
    schema_id, indexes, _ = split(full)
    assert indexes == (0,) and full[5] == 0  # the first message: the single byte 0
    assert decoder(full) == (None, FULL)
    assert decoder(serialize(schema_registry, Order(), prefix)) == (None, DEFAULTS)
    assert decoder(serialize(schema_registry, Order(card="4111"), prefix)) == (
        None,
        {**DEFAULTS, "card": "4111"},
    )

    # What the registry hands back is what the Python serializer registered: base64 of a descriptor.
    stored = SchemaRegistry(schema_registry).get_json(f"/schemas/ids/{schema_id}")
    assert stored["schemaType"] == "PROTOBUF"
    assert (
        descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(stored["schema"])).package == "pbtest"
    )
    assert [r["name"] for r in stored["references"]] == ["pbtest_common_address.proto"]

    # A nested message type, under a subject of its own: its index array is the path [0, k].
    line = serialize(schema_registry, Line(sku="s", qty=2, child=Line(qty=1)), f"{prefix}-line")
    _, indexes, _ = split(line)
    assert list(indexes) == _create_index_array(Line.DESCRIPTOR) and len(indexes) == 2 and indexes[0] == 0
    assert decoder(line) == (None, {"sku": "s", "qty": 2, "child": {"sku": "", "qty": 1}})
    other = serialize(schema_registry, Other(name="o"), f"{prefix}-other")
    assert split(other)[1] == (1,)
    assert decoder(other) == (None, {"name": "o"})


def test_a_schema_registered_as_proto_text_decodes_the_same_bytes(schema_registry, prefix):
    address_id = register_text(schema_registry, f"{prefix}-address", ADDRESS)
    reference = {"name": "pbtest_common_address.proto", "subject": f"{prefix}-address", "version": 1}
    text_id = register_text(schema_registry, f"{prefix}-orders", ORDERS, [reference])
    assert address_id != text_id
    stored = SchemaRegistry(schema_registry).get_json(f"/schemas/ids/{text_id}")
    assert stored["schema"].startswith('syntax = "proto3";')  # text stays text

    decoder = ProtobufDecoder(schema_registry)
    for message, expected in [(full_order(), FULL), (Order(), DEFAULTS)]:
        _, indexes, payload = split(serialize(schema_registry, message, prefix))
        assert decoder(header(text_id, indexes) + bytes(payload)) == (None, expected)
    _, indexes, payload = split(serialize(schema_registry, Line(sku="s"), f"{prefix}-line"))
    assert decoder(header(text_id, indexes) + bytes(payload)) == (None, {"sku": "s", "qty": 0})


def test_records_that_cannot_be_read_are_rejected_with_their_reasons(schema_registry, prefix):
    decoder = ProtobufDecoder(schema_registry)
    good = serialize(schema_registry, full_order(), prefix)
    schema_id, _, payload = split(good)
    avro_id = SchemaRegistry(schema_registry).register(f"{prefix}-avro", {"type": "string"})
    unknown_id = 2**31 - 1
    cases = [
        (b"\x01" + good[1:], protobuf.NO_HEADER),
        (
            header(unknown_id) + bytes(payload),
            f"not Protobuf: unknown schema id {unknown_id} (the schema registry has no such schema)",
        ),
        (header(avro_id) + bytes(payload), f"not Protobuf: schema id {avro_id} is AVRO, not PROTOBUF"),
        (good[:-3], f"not Protobuf: does not decode with schema id {schema_id} (DecodeError)"),
        (
            header(schema_id, (5,)) + bytes(payload),
            f"not Protobuf: message indexes [5] outside schema id {schema_id}",
        ),
        (
            header(schema_id, (1,)) + bytes(payload),  # an Order read as an Other
            "not Protobuf: unknown fields in a pbtest.Other message, so a wrong message index or schema "
            f"(schema id {schema_id})",
        ),
        (
            good[:5] + b"\x04",  # a count of 2, no indexes
            f"not Protobuf: bad message-index array after schema id {schema_id} (truncated varint)",
        ),
    ]
    for value, reason in cases:
        assert decoder(value) == (reason, None)
    assert decoder(good) == (None, FULL)  # the rejections cost the good record nothing
