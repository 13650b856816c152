"""A Kafka sink's output as Avro, when its input is Avro: the declared columns as an Avro record.

The schema follows the declaration, not the input's writer schema (a pipeline may pick, rename and
type fields), and is registered under the output topic's `<topic>-value` subject, so consumers
decode it with any Confluent-compatible deserializer. A column that is not `required` is a union
with null, default null, so the schema evolves backward-compatibly as optional columns are added.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from eosflow.schema.arrow import json_text
from eosflow.schema.avro import RegistryConfig, SchemaRegistry, encode
from eosflow.schema.declaration import Column, RecordSchema
from eosflow.schema.types import ColumnType

_SCALARS: dict[str, object] = {
    "text": "string",
    "uuid": {"type": "string", "logicalType": "uuid"},
    "bigint": "long",
    "integer": "int",
    "double": "double",
    "boolean": "boolean",
    "timestamptz": {"type": "long", "logicalType": "timestamp-micros"},
    "date": {"type": "int", "logicalType": "date"},
    "jsonb": "string",  # the JSON text: Avro has no type for any JSON value
    "bytea": "bytes",
}


def avro_type(ctype: ColumnType) -> object:
    if ctype.element is not None:
        return {"type": "array", "items": avro_type(ctype.element)}
    if ctype.declared.startswith("numeric("):
        precision, scale = (int(x) for x in ctype.declared[len("numeric(") : -1].split(","))
        return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    return _SCALARS[ctype.declared]


def output_schema(pipeline: str, schema: RecordSchema) -> dict:
    """The Avro record schema of a pipeline's output records."""

    def field(c: Column) -> dict:
        t = avro_type(c.type)
        return (
            {"name": c.name, "type": t}
            if c.required
            else {"name": c.name, "type": ["null", t], "default": None}
        )

    return {
        "type": "record",
        "name": pipeline,
        "namespace": "eosflow.output",
        "fields": [field(c) for c in schema.columns],
    }


@dataclass(frozen=True)
class AvroOutput:
    """What a Spark task needs to encode the output: the registered schema and its id (picklable)."""

    schema_id: int
    schema: dict
    names: tuple[str, ...]
    jsonb: frozenset[str]  # columns carried as JSON text

    @cached_property
    def _parsed(self) -> object:
        import fastavro

        return fastavro.parse_schema(self.schema)

    def __call__(self, typed: Sequence[object]) -> bytes:
        record = {
            n: (json_text(v) if n in self.jsonb and v is not None else v)
            for n, v in zip(self.names, typed, strict=True)
        }
        return encode(self.schema_id, self._parsed, record)


def register_output(registry: RegistryConfig, pipeline: str, schema: RecordSchema, topic: str) -> AvroOutput:
    body = output_schema(pipeline, schema)
    schema_id = SchemaRegistry(registry).register(f"{topic}-value", body)
    jsonb = frozenset(c.name for c in schema.columns if c.type.declared == "jsonb")
    return AvroOutput(schema_id, body, tuple(c.name for c in schema.columns), jsonb)
