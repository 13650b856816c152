"""A Kafka sink's output as Protobuf (`output_format: protobuf`): the declared columns as one message.

Like the Avro output (eosflow.schema.avro_out), the message follows the declaration, not the input, and
is registered under `<topic>-value` as confluent-kafka-python registers one: base64 of a serialized
FileDescriptorProto, schemaType PROTOBUF, Google's Timestamp not registered (every Protobuf runtime has
it). Records are in Confluent's wire format, message index [0], so any Confluent-compatible Protobuf
deserializer reads them.

Field numbers follow the declared order (column i is field i + 1): a column added at the end adds a
field, which the registry's BACKWARD check accepts; a column inserted before others renumbers them,
which the registry refuses at registration, before anything is produced. A column that is not
`required` is proto3 `optional` (its absence means NULL); an array is `repeated`, so a NULL array
reads back as empty.

    declared          field                       value
    text, uuid        string
    bigint, integer   int64, int32
    double            double
    boolean           bool
    numeric(p,s)      string                      its exact digits ("12.50"): Protobuf has no decimal
    date              string                      YYYY-MM-DD
    timestamptz       google.protobuf.Timestamp
    jsonb             string                      the JSON text, as the Avro output writes it
    bytea             bytes
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from eosflow.schema.arrow import json_text
from eosflow.schema.avro import RegistryConfig, SchemaRegistry
from eosflow.schema.declaration import RecordSchema
from eosflow.schema.protobuf_wire import header

if TYPE_CHECKING:
    from eosflow.schema.types import Value

_F = descriptor_pb2.FieldDescriptorProto
_TYPES = {
    "text": _F.TYPE_STRING,
    "uuid": _F.TYPE_STRING,
    "bigint": _F.TYPE_INT64,
    "integer": _F.TYPE_INT32,
    "double": _F.TYPE_DOUBLE,
    "boolean": _F.TYPE_BOOL,
    "date": _F.TYPE_STRING,
    "jsonb": _F.TYPE_STRING,
    "bytea": _F.TYPE_BYTES,
}
_TIMESTAMP = "google/protobuf/timestamp.proto"


def output_file(pipeline: str, schema: RecordSchema) -> descriptor_pb2.FileDescriptorProto:
    """The .proto file (as a descriptor) of a pipeline's output records: package eosflow.output, one
    message named after the pipeline."""
    file = descriptor_pb2.FileDescriptorProto(
        name=f"eosflow_output_{pipeline}.proto", package="eosflow.output", syntax="proto3"
    )
    message = file.message_type.add(name=_message_name(pipeline))
    for number, column in enumerate(schema.columns, start=1):
        scalar = column.type.element or column.type
        field = message.field.add(name=column.name, number=number, json_name=column.name)
        if scalar.declared == "timestamptz":
            field.type, field.type_name = _F.TYPE_MESSAGE, ".google.protobuf.Timestamp"
            if _TIMESTAMP not in file.dependency:
                file.dependency.append(_TIMESTAMP)
        else:
            field.type = _TYPES.get(scalar.declared, _F.TYPE_STRING)  # numeric(p,s): its digits as text
        if column.type.is_array:
            field.label = _F.LABEL_REPEATED
        else:
            field.label = _F.LABEL_OPTIONAL
            if not column.required and field.type != _F.TYPE_MESSAGE:  # proto3 `optional`: presence
                field.proto3_optional = True
                field.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=f"_{column.name}")
    return file


def _message_name(pipeline: str) -> str:
    name = "".join(part[:1].upper() + part[1:] for part in pipeline.replace("-", "_").split("_"))
    return name if name[:1].isalpha() else f"P{name}"


@dataclass(frozen=True)
class ProtobufOutput:
    """What a Spark task needs to encode the output (picklable: the message class is made per process)."""

    schema_id: int
    file: bytes  # the serialized FileDescriptorProto
    names: tuple[str, ...]
    kinds: tuple[str, ...]  # each column's declared scalar type

    def __call__(self, typed: Sequence[object]) -> bytes:
        message = _message_class(self.file)()
        for name, kind, value in zip(self.names, self.kinds, typed, strict=True):
            if value is None:
                continue
            if type(value) is list:
                field = getattr(message, name)
                if kind == "timestamptz":
                    for v in value:
                        field.add().FromDatetime(v)
                else:
                    field.extend(_plain(kind, v) for v in value)
            elif kind == "timestamptz":
                getattr(message, name).FromDatetime(value)
            else:
                setattr(message, name, _plain(kind, value))
        return header(self.schema_id) + message.SerializeToString()


def _plain(kind: str, value: Value) -> object:
    if kind == "jsonb":
        return json_text(value)
    if kind == "date":
        return value.isoformat()
    if kind.startswith("numeric("):
        return format(value, "f")  # the digits, never an exponent ("100", not "1E+2")
    return value


_CLASSES: dict[bytes, type] = {}


def _message_class(file: bytes) -> type:
    found = _CLASSES.get(file)
    if found is None:
        proto = descriptor_pb2.FileDescriptorProto.FromString(file)
        pool = descriptor_pool.DescriptorPool()
        timestamp = descriptor_pb2.FileDescriptorProto()
        timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp)
        pool.Add(timestamp)
        pool.Add(proto)
        name = f"{proto.package}.{proto.message_type[0].name}"
        found = _CLASSES[file] = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    return found


def register_output(
    registry: RegistryConfig, pipeline: str, schema: RecordSchema, topic: str
) -> ProtobufOutput:
    file = output_file(pipeline, schema).SerializeToString()
    text = base64.standard_b64encode(file).decode()
    schema_id = SchemaRegistry(registry).register_text(f"{topic}-value", text, "PROTOBUF")
    kinds = tuple((c.type.element or c.type).declared for c in schema.columns)
    return ProtobufOutput(schema_id, file, tuple(c.name for c in schema.columns), kinds)
