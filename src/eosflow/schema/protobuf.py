"""Protobuf record values in the Confluent wire format, decoded with writer schemas from a schema registry.

A value is magic byte 0, a 4-byte big-endian schema id, the message-index array (which message of
the schema's file: eosflow.schema.protobuf_wire), then the serialized message. The writer schema
comes from the registry, once per id and process (eosflow.schema.protobuf_schema: base64 descriptors
or .proto text, with references and Google's well-known types). The message is parsed in C (upb).

Rejected rows, each `not Protobuf: ...`: no wire-format header; a bad message-index array (cut, a
varint over 10 bytes, a count not 1-100); an unknown schema id; a schema that is not PROTOBUF; one
that does not parse or compile, or whose references are missing; message indexes outside the schema;
bytes that do not decode under it; unknown fields (a wrong message index or schema usually shows
so); proto2 required fields missing; a string that is not UTF-8 (proto2); an invalid Timestamp or
Duration; nesting deeper than 100.
A registry that cannot answer stops the run (RegistryUnavailableError), as for Avro.

The message becomes the JSON-like dict eosflow checks, keyed by .proto field names. A field with
presence (messages, proto3 `optional`, oneof members, proto2 fields) that is not set is left out, so
a column reads it as missing/NULL (a proto2 default is not filled in); of a oneof, only the member set
appears. A field without presence always appears, with its default (a proto3 int64 0 is 0).

    proto type                      value                   eosflow column types that take it
    string                          str                     text (uuid, date, timestamptz if so spelled)
    int32/64, sint, (s)fixed, uint  int                     bigint, integer (in range), numeric(p,s), double
    double, float                   float                   double, numeric(p,s)
    bool                            bool                    boolean
    enum                            its value's name (str)  text; a number it does not name: int
    bytes                           bytes                   bytea
    google.protobuf.Timestamp       RFC 3339 str, ...Z      timestamptz
    google.protobuf.Duration        str, e.g. "1.5s"        text
    wrappers (Int64Value, ...)      the inner value         as its inner type; an absent wrapper: NULL
    Struct, Value, ListValue        dict, any, list         jsonb (numbers are floats, as in protobuf)
    other messages                  dict                    jsonb
    repeated                        list                    <type>[] of the element's type, jsonb
    map<K, V>                       dict, keys as str       jsonb (bool keys "true"/"false")
"""

from __future__ import annotations

from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.unknown_fields import UnknownFieldSet

from eosflow.schema.avro import RegistryConfig, Rejection, SchemaRegistry
from eosflow.schema.protobuf_schema import load
from eosflow.schema.protobuf_wire import NO_HEADER, WireError, header, split

__all__ = ["NO_HEADER", "ProtobufDecoder", "encode", "message_class", "to_json_like"]

MAX_DEPTH = 100  # nested messages (and Struct values) below the record
_WRAPPERS = {f"google.protobuf.{t}Value" for t in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32")}
_WRAPPERS |= {"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue"}
_STRUCT = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")

# By (registry, schema id): (pool, the schema's FileDescriptorProto) or the Rejection of its records;
# by (registry, schema id, message indexes): the message class (valid indexes only, so few).
_WRITERS: dict[tuple[RegistryConfig, int], tuple | Rejection] = {}  # (pool, file descriptor)
_CLASSES: dict[tuple[RegistryConfig, int, tuple[int, ...]], type[Any]] = {}  # generated message classes
_PLANS: dict[object, tuple] = {}  # message descriptor -> how each field becomes a value


class _Unconvertible(ValueError):
    """A parsed message that has no JSON-like form; str() is the reason after `not Protobuf: `."""


class ProtobufDecoder:
    """A value in the Confluent wire format -> (None, the record as JSON-like values) or (reason, None)."""

    def __init__(self, config: RegistryConfig) -> None:
        self.registry = SchemaRegistry(config)  # holds the config only: Spark pickles the decoder

    def __call__(self, value: bytes) -> tuple[str | None, dict | None]:
        try:
            schema_id, indexes, payload = split(value)
        except WireError as exc:
            return str(exc), None
        cls = message_class(self.registry, schema_id, indexes)
        if isinstance(cls, Rejection):
            return str(cls), None
        try:
            message = cls.FromString(payload)
        except Exception as exc:  # noqa: BLE001 - any failure to parse is the record's, not the run's
            return f"not Protobuf: does not decode with schema id {schema_id} ({type(exc).__name__})", None
        if not message.IsInitialized():  # proto2 `required`: upb's parse does not check them
            missing = ", ".join(message.FindInitializationErrors())
            return f"not Protobuf: required fields missing: {missing} (schema id {schema_id})", None
        try:
            return None, to_json_like(message)
        except _Unconvertible as exc:
            return f"not Protobuf: {exc} (schema id {schema_id})", None


def message_class(
    registry: SchemaRegistry, schema_id: int, indexes: tuple[int, ...]
) -> type[Any] | Rejection:
    """The class of the message `indexes` names in writer schema `schema_id`, or the Rejection."""
    found = _CLASSES.get((registry.config, schema_id, indexes))
    if found is not None:
        return found
    writer = _WRITERS.get((registry.config, schema_id))
    if writer is None:
        writer = _WRITERS[(registry.config, schema_id)] = load(registry, schema_id)
    if isinstance(writer, Rejection):
        return writer
    pool, file = writer
    names, level = [file.package] if file.package else [], file.message_type
    for index in indexes:
        if index >= len(level):
            return Rejection(f"not Protobuf: message indexes {list(indexes)} outside schema id {schema_id}")
        names.append(level[index].name)
        level = level[index].nested_type
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(".".join(names)))
    _CLASSES[(registry.config, schema_id, indexes)] = cls
    return cls


def to_json_like(message, depth: int = 0) -> dict:
    """A parsed message as the values JSON parsing gives, by the mapping in this module's docstring."""
    if depth > MAX_DEPTH:
        raise _Unconvertible(f"nested deeper than {MAX_DEPTH}")
    # Unknown fields are checked in every message converted here, at any depth (nested, repeated,
    # map values, Timestamps, Durations, wrappers; not inside a Struct): a field the writer schema does
    # not define means bytes written as another message (a wrong index or schema id), never evolution.
    # (A proto2 enum number the enum does not name is an unknown field too: protobuf parses it so.)
    if len(UnknownFieldSet(message)):
        raise _Unconvertible(
            f"unknown fields in a {message.DESCRIPTOR.full_name} message, so a wrong message index or schema"
        )
    out: dict[str, object] = {}
    for name, presence, shape, convert in _plan(message.DESCRIPTOR):
        if presence and not message.HasField(name):
            continue
        value = getattr(message, name)
        if shape == "map":
            out[name] = {_key(k): v if convert is None else convert(v, depth) for k, v in value.items()}
        elif shape == "list":
            out[name] = list(value) if convert is None else [convert(v, depth) for v in value]
        else:
            out[name] = value if convert is None else convert(value, depth)
    return out


def _key(key: object) -> str:
    if type(key) is bool:
        return "true" if key else "false"  # as protobuf's JSON mapping writes them
    return key if type(key) is str else str(key)


def _plan(descriptor) -> tuple:
    plan = _PLANS.get(descriptor)
    if plan is None:
        plan = _PLANS[descriptor] = tuple(_field_plan(f) for f in descriptor.fields)
    return plan


def _field_plan(field: FieldDescriptor) -> tuple:
    entry = field.message_type
    if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
        return field.name, False, "map", _converter(entry.fields_by_name["value"], field.name)
    shape = "list" if field.is_repeated else "one"
    return field.name, field.has_presence, shape, _converter(field, field.name)


def _converter(field: FieldDescriptor, name: str):
    """How a value of `field` becomes a JSON-like value; None: as it is (ints, bool, bytes, floats:
    a float32 comes back widened to the double nearest it, 0.1f as 0.10000000149011612)."""
    if field.type == FieldDescriptor.TYPE_ENUM:
        names = {number: v.name for number, v in field.enum_type.values_by_number.items()}
        return lambda v, depth: names.get(v, v)
    if field.type == FieldDescriptor.TYPE_STRING:
        return _string(name)
    if field.message_type is None:
        return None
    kind = field.message_type.full_name
    if kind in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        return _json_string(name, kind)
    if kind in _WRAPPERS:
        return lambda v, depth: to_json_like(v, depth + 1)["value"]  # proto3: the value always appears
    if kind in _STRUCT:
        return _struct
    return lambda v, depth: to_json_like(v, depth + 1)


def _string(name: str):
    def convert(v, depth):
        if type(v) is bytes:  # proto2 does not validate UTF-8; upb then gives the raw bytes
            raise _Unconvertible(f"field {name} holds a string that is not UTF-8")
        return v

    return convert


def _json_string(name: str, kind: str):
    def convert(v, depth):
        to_json_like(v, depth + 1)  # its unknown fields
        try:
            return v.ToJsonString()  # a Timestamp as RFC 3339 in UTC, ending in Z; a Duration as "1.5s"
        except ValueError:
            raise _Unconvertible(f"field {name} holds an invalid {kind}") from None

    return convert


def _struct(v, depth: int) -> object:
    """Struct, Value and ListValue as the plain JSON value (json_format.MessageToDict's, NaN kept)."""
    if depth > MAX_DEPTH:
        raise _Unconvertible(f"nested deeper than {MAX_DEPTH}")
    kind = v.DESCRIPTOR.name
    if kind == "Struct":
        return {k: _struct(x, depth + 1) for k, x in v.fields.items()}
    if kind == "ListValue":
        return [_struct(x, depth + 1) for x in v.values]
    which = v.WhichOneof("kind")
    if which in ("struct_value", "list_value"):
        return _struct(getattr(v, which), depth + 1)
    return None if which is None or which == "null_value" else getattr(v, which)


def encode(schema_id: int, message, indexes: tuple[int, ...] = (0,)) -> bytes:
    """A message in the Confluent wire format: what a Confluent Protobuf serializer writes."""
    return header(schema_id, indexes) + message.SerializeToString()
