"""The value formats a randomized schedule's topic is written in, and each format's malformed shapes.

A machine draws one format for its topic: plain JSON, JSON in Confluent's JSON Schema framing, Avro or
Protobuf in Confluent's wire format (their writer schemas registered with the stack's registry, as a
producer's serializer registers them). A poison kind names a shape of bad record; each format writes
it in its own terms, and a kind with no meaning in a format (a message index in Avro) is written as that
format's nearest malformed shape. Every poison record must end as a rejected row, whatever its format.
"""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass, field

import fastavro
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from eosflow.schema.avro import RegistryConfig, SchemaRegistry

FORMATS = ("json", "json_schema", "avro", "protobuf")
# Wire-format shapes, beside world.POISON's: a wrong magic byte, an id the registry does not know, a
# message cut short, a message index outside the schema.
WIRE_POISON = ("wrong_magic", "unknown_schema_id", "truncated", "wrong_message_index")
UNKNOWN_ID = 2**31 - 11

_AVRO_FIELDS = [
    {"name": "event_id", "type": "string"},
    {"name": "event_type", "type": "string"},
    {"name": "event_time", "type": "string"},
    {"name": "order_id", "type": "string"},
    {"name": "customer_id", "type": "string"},
    {"name": "amount_cents", "type": "long"},
    {"name": "currency", "type": "string"},
    {"name": "schema_version", "type": "int"},
]
AVRO = {"type": "record", "name": "Order", "namespace": "random", "fields": _AVRO_FIELDS}
AVRO_WITHOUT_AMOUNT = {**AVRO, "fields": [f for f in _AVRO_FIELDS if f["name"] != "amount_cents"]}


def _proto_file() -> descriptor_pb2.FileDescriptorProto:
    """orders as proto3: amount_cents `optional` (so a record may lack it), schema_version last (so a
    message cut by three bytes ends inside currency); and a second message for a wrong index."""
    t = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="random_orders.proto", package="random", syntax="proto3")
    order = file.message_type.add(name="Order")
    for number, (name, kind) in enumerate(
        [
            ("event_id", t.TYPE_STRING),
            ("event_type", t.TYPE_STRING),
            ("event_time", t.TYPE_STRING),
            ("order_id", t.TYPE_STRING),
            ("customer_id", t.TYPE_STRING),
            ("amount_cents", t.TYPE_INT64),
            ("currency", t.TYPE_STRING),
            ("schema_version", t.TYPE_INT32),
        ],
        start=1,
    ):
        f = order.field.add(name=name, number=number, type=kind, label=t.LABEL_OPTIONAL)
        if name == "amount_cents":
            f.proto3_optional, f.oneof_index = True, 0
            order.oneof_decl.add(name="_amount_cents")
    other = file.message_type.add(name="Other")
    other.field.add(name="name", number=1, type=t.TYPE_STRING, label=t.LABEL_OPTIONAL)
    return file


@dataclass
class Codec:
    """How one machine's topic writes a record body, valid or of a poison kind."""

    format: str
    ids: dict[str, int] = field(default_factory=dict)

    @property
    def declared(self) -> str:
        """The pipeline's `format`: JSON Schema framing is read under format json."""
        return "json" if self.format == "json_schema" else self.format

    @classmethod
    def register(cls, fmt: str, registry: RegistryConfig | None, topic: str) -> Codec:
        codec = cls(fmt)
        if fmt == "json":
            return codec
        assert registry is not None, "the stack runs a schema registry unless EOSFLOW_REGISTRY_PORT=0"
        client = SchemaRegistry(registry)
        subject = f"{topic}-value"
        if fmt == "json_schema":
            schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
            codec.ids["v1"] = client.register_text(subject, json.dumps(schema), "JSON")
        elif fmt == "avro":
            codec.ids["v1"] = client.register(subject, AVRO)
            codec.ids["v2"] = client.register(subject, AVRO_WITHOUT_AMOUNT)
        else:
            text = base64.standard_b64encode(_proto_file().SerializeToString()).decode()
            codec.ids["v1"] = client.register_text(subject, text, "PROTOBUF")
        return codec

    def value(self, kind: str, body: dict, n: int) -> bytes | None:
        """The value of a record of `kind` ("valid", a world.POISON kind or a WIRE_POISON one)."""
        if kind == "null_value":
            return None
        if kind == "not_json":  # plain text: no header either
            return f"not json {n}".encode()
        if kind == "missing_field":  # under Avro, written with the schema version that has no such field
            return self._encode({k: v for k, v in body.items() if k != "amount_cents"})
        if kind == "nul_in_json_text":
            return self._encode({**body, "order_id": f"ord-\u0000{n}"})
        if kind == "nul_raw_in_value":
            return b'{"event_id": "a\x00b"}' if self.declared == "json" else self._encode(body)[:-3]
        if kind in WIRE_POISON:
            return self._wire_poison(kind, body)
        return self._encode(body)  # valid, and the poison in a key or header

    def _encode(self, body: dict) -> bytes:
        if self.format == "json":
            return json.dumps(body).encode()
        if self.format == "json_schema":
            return _header(self.ids["v1"]) + json.dumps(body).encode()
        if self.format == "avro":
            schema, version = (AVRO, "v1") if "amount_cents" in body else (AVRO_WITHOUT_AMOUNT, "v2")
            out = io.BytesIO()
            fastavro.schemaless_writer(out, fastavro.parse_schema(schema), body)
            return _header(self.ids[version]) + out.getvalue()
        message = _order_class()(**body)
        return _header(self.ids["v1"]) + b"\x00" + message.SerializeToString()  # message index [0]

    def _wire_poison(self, kind: str, body: dict) -> bytes:
        good = self._encode(body)
        if self.declared == "json":  # no registry is asked: only a framing that cannot be read
            return {
                "wrong_magic": b"\x01" + good,
                "unknown_schema_id": b"\x00\x00\x00",  # a header cut before its id ends
                "truncated": good[:-3],
                "wrong_message_index": b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + b"[1, 2",
            }[kind]
        if kind == "wrong_magic":
            return b"\x01" + good[1:]
        if kind == "unknown_schema_id":
            return _header(UNKNOWN_ID) + good[5:]
        if kind == "wrong_message_index" and self.format == "protobuf":
            return good[:5] + b"\x02\x02" + good[6:]  # [1]: the Other message, whose fields these are not
        return good[:-3]  # truncated (Avro has no message index: cut short instead)


def _header(schema_id: int) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big")


_CLASS: list[type] = []


def _order_class() -> type:
    if not _CLASS:
        pool = descriptor_pool.DescriptorPool()
        pool.Add(_proto_file())
        _CLASS.append(message_factory.GetMessageClass(pool.FindMessageTypeByName("random.Order")))
    return _CLASS[0]
