"""A publisher's rows as Avro or Protobuf (`format: avro | protobuf`): the outbox table's columns as a schema.

The schema is made from the outbox's columns as the catalog has them when the publisher starts, mapped
to the declared column types a pipeline would use, so the Kafka sink's encoders write it
(eosflow.schema.avro_out, eosflow.schema.protobuf_out) and it is registered the same way, under
`<topic>-value`. A NOT NULL column is required, any other optional. Types with no counterpart
(intervals, ranges, network addresses, unconstrained numerics, local timestamps, ...) are written as
the text JSON output gives them; arrays of those, and of json or bytea, as JSON text.

A value the format cannot carry (a NaN or infinite numeric, an infinite timestamp or date) makes its
row Unpublishable: a dead letter with the reason, as for JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import psycopg

from eosflow.publish import outbox
from eosflow.schema.declaration import Column, RecordSchema
from eosflow.schema.types import MAX_NUMERIC_PRECISION, parse_type
from eosflow.settings import Settings

if TYPE_CHECKING:  # typed only: the sources sit below the declarations (tests/unit/project/test_layers.py)
    from eosflow.publish.declaration import Publisher


class RowFormat(StrEnum):
    """How a publisher writes a row's value (`format:`): parsed once where the publisher is declared."""

    JSON = "json"  # one JSON object (eosflow.publish.outbox.row_value)
    AVRO = "avro"  # the outbox's columns as a registered Avro schema, Confluent's wire format
    PROTOBUF = "protobuf"  # ... as a registered Protobuf schema


_SCALARS = {
    "text": "text",
    "character varying": "text",
    "character": "text",
    "uuid": "uuid",
    "smallint": "integer",
    "integer": "integer",
    "bigint": "bigint",
    "real": "double",
    "double precision": "double",
    "boolean": "boolean",
    "timestamp with time zone": "timestamptz",
    "date": "date",
    "json": "jsonb",
    "jsonb": "jsonb",
    "bytea": "bytea",
}
_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)")


def declared_type(postgres: str) -> str:
    """A catalog type (format_type's spelling) as the declared type its values are written as."""
    if postgres.endswith("[]"):
        element = declared_type(postgres[:-2])
        return "jsonb" if element in ("jsonb", "bytea") else f"{element}[]"
    base = re.sub(r"\(\d+\)$", "", postgres)  # character varying(20), character(3)
    if m := _NUMERIC.fullmatch(postgres):
        return postgres if int(m[1]) <= MAX_NUMERIC_PRECISION else "text"
    return _SCALARS.get(base, "text")


def outbox_schema(conn: psycopg.Connection, publisher: Publisher) -> RecordSchema:
    """The outbox's columns, in table order, as a record declaration."""
    rows = conn.execute(
        "select attname, format_type(atttypid, atttypmod), attnotnull from pg_attribute "
        "where attrelid = %s::regclass and attnum > 0 and not attisdropped order by attnum",
        (publisher.table,),
    ).fetchall()
    columns = tuple(
        Column(name=name, type=parse_type(declared_type(pg_type)), required=not_null, path=(name,))
        for name, pg_type, not_null in rows
        if name != outbox.XID_COLUMN
    )
    return RecordSchema(columns=columns)


def row_encoder(
    conn: psycopg.Connection, settings: Settings, publisher: Publisher
) -> Callable[[outbox.OutboxRow], bytes]:
    """How the publisher writes a row's value: JSON (outbox.row_value), or the outbox's columns as a
    registered Avro or Protobuf schema. Refused before anything is published without a registry."""
    if publisher.format == RowFormat.JSON:
        return outbox.row_value
    if settings.registry is None:
        from eosflow.errors import PipelineConfigError

        raise PipelineConfigError(
            f"publisher {publisher.name!r} writes {publisher.format}, and no schema registry is configured: "
            "set EOSFLOW_SCHEMA_REGISTRY_URL, or format: json"
        )
    schema = outbox_schema(conn, publisher)
    registry = settings.registry
    assert registry is not None  # refused above without one
    encode: Callable[[Sequence[object]], bytes]
    if publisher.format == RowFormat.AVRO:
        from eosflow.schema.avro_out import register_output as register_avro

        encode = register_avro(registry, publisher.name, schema, publisher.topic)
    else:
        from eosflow.schema.protobuf_out import register_output as register_protobuf

        encode = register_protobuf(registry, publisher.name, schema, publisher.topic)
    convert = [(c.name, _converter(c)) for c in schema.columns]

    def encoded(row: outbox.OutboxRow) -> bytes:
        typed = [None if (v := row[name]) is None else to(name, v) for name, to in convert]
        try:
            return encode(typed)
        except (ValueError, TypeError, OverflowError) as exc:
            raise outbox.Unpublishable(f"the row does not encode as {publisher.format}: {exc}") from None

    return encoded


def _converter(column: Column) -> Callable[[str, Any], object]:
    """A psycopg value -> the typed value the output encoders take (as a pipeline's check gives them)."""
    declared = column.type.declared
    element = (column.type.element or column.type).declared
    if declared == "jsonb":
        return lambda name, v: outbox.plain_value(v)
    if declared == "text":
        return lambda name, v: v if type(v) is str else outbox.as_text(v)

    def one(name: str, v: Any) -> object:  # Any: a psycopg value of the column's type
        if element == "uuid":
            return str(v)
        if element == "bytea":
            return bytes(v)
        if element in ("timestamptz", "date") and type(v) is str:  # the loader's infinity
            raise outbox.Unpublishable(
                f"column {name!r} holds {v}, which {element} in this format cannot carry"
            )
        if type(v) is Decimal and not v.is_finite():
            raise outbox.Unpublishable(f"column {name!r} holds {v}, which a decimal cannot carry")
        return v

    if column.type.is_array:
        return lambda name, v: [None if x is None else one(name, x) for x in v]
    return one
