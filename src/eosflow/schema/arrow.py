"""A schema's rows as Arrow: the columns a checked batch carries, and typed values -> arrays.

Arrow's CSV writer (the COPY's format) has no list type and knows nothing of jsonb, so arrays go as
Postgres array literals and jsonb as JSON text: both are strings Postgres parses on the way in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

import pyarrow as pa

from eosflow.schema.declaration import Column, RecordSchema

if TYPE_CHECKING:
    from eosflow.schema.types import Value

UTC_MICROS = pa.timestamp("us", tz="UTC")

# The Kafka record's own columns, first in every target, as today's orders table has them.
KAFKA_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("kafka_topic", pa.string()),
    ("kafka_partition", pa.int32()),
    ("kafka_offset", pa.int64()),
    ("kafka_timestamp", UTC_MICROS),
)
TRAILING_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("batch_id", pa.string()),
    ("transform_version", pa.string()),
    ("declaration_version", pa.int32()),  # the declaration the row was checked against
)


def key_type(schema: RecordSchema) -> pa.DataType:
    if schema.key_type is not None:
        return schema.key_type.arrow
    return pa.binary() if schema.key == "bytes" else pa.string()


def valid_columns(schema: RecordSchema) -> list[tuple[str, pa.DataType]]:
    """The target's columns, in order, with the Arrow types the checked batch carries them in."""
    return [
        *KAFKA_COLUMNS,
        ("kafka_key", key_type(schema)),
        ("kafka_headers", pa.string()),
        *((c.name, c.type.arrow) for c in schema.columns),
        *TRAILING_COLUMNS,
    ]


def to_arrow(column: Column, values: Sequence[object]) -> pa.Array:
    """One column's typed values (None for NULL) as the Arrow array the COPY writes."""
    ctype = column.type
    if ctype.element is not None:
        element = ctype.element.declared
        return pa.array([None if v is None else array_literal(v, element) for v in values], pa.string())
    if ctype.declared == "jsonb":
        return pa.array([None if v is None else json_text(v) for v in values], pa.string())
    return pa.array(values, ctype.arrow)


def json_text(value: object) -> str:
    """A JSON value as compact text; Decimals (from exact number parsing) written as they were read."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except TypeError:  # a Decimal somewhere inside
        return _json_with_decimals(value)


def _json_with_decimals(value: Value) -> str:
    t = type(value)
    if t is Decimal:
        return str(value)
    if t is dict:
        return (
            "{"
            + ",".join(
                f"{json.dumps(k, ensure_ascii=False)}:{_json_with_decimals(v)}" for k, v in value.items()
            )
            + "}"
        )
    if t is list:
        return "[" + ",".join(_json_with_decimals(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def array_literal(values: Value, element: str) -> str:
    """A Postgres array literal, e.g. {"a","b \\"c\\""} or {1,2}: every element quoted where text-like."""
    return "{" + ",".join(_element(v, element) for v in values) + "}"


def _element(v: Value, element: str) -> str:
    t = type(v)
    if t is str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if t is bool:
        return "true" if v else "false"
    if t is datetime:
        return '"' + v.astimezone(UTC).isoformat() + '"'
    if t is date:
        return v.isoformat()
    if t is float:
        return repr(v)
    return str(v)  # int, Decimal
