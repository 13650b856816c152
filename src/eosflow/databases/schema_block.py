"""A table's declaration read from Debezium's own schema block (JsonConverter with schemas.enable).

Debezium describes each change's key and value in Kafka Connect's schema language: the key's fields are
the table's primary key, the value's `after` struct its columns, each a Connect type (int8..int64, float,
double, boolean, string, bytes, array, struct) with an optional semantic `name` (io.debezium.time.Date, ...)
and, with `column.propagate.source.type`, the source column's own type in `parameters`. This module turns
them into declared columns (docs/DESIGN.md, "A whole database in one declaration"); it is pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from eosflow import names

# Debezium's semantic names of the declared types' value forms (eosflow.schema.changes reads them).
_NAMED = {
    "io.debezium.time.Date": "date",
    "io.debezium.time.MicroTimestamp": "timestamptz",  # a timestamp without zone, read as UTC
    "io.debezium.time.ZonedTimestamp": "timestamptz",
    "io.debezium.data.Json": "jsonb",
    "io.debezium.data.Uuid": "uuid",
}
_PLAIN = {
    "int8": "integer",
    "int16": "integer",
    "int32": "integer",
    "int64": "bigint",
    "float": "double",
    "double": "double",
    "boolean": "boolean",
    "string": "text",
    "bytes": "bytea",
}
_SOURCE_TYPE = "__debezium.source.column.type"
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_PRECISION = 38  # a declared numeric's (eosflow.schema.types)


class SchemaBlockError(ValueError):
    """The records do not describe a table eosflow can declare; the message says why and what to do."""


@dataclass(frozen=True)
class TableShape:
    """What discovery learns of one table from its records: declared columns (as pipelines.yml would
    spell them), the primary key, and the fields it left out, each with why."""

    columns: tuple[dict[str, Any], ...]
    primary_key: tuple[str, ...]
    left_out: dict[str, str] = field(default_factory=dict)
    # Why the member is refused: the table's records now differ from this shape in a way discovery does
    # not apply (a type, the key); None while they do not.
    conflict: str | None = None

    @property
    def fields(self) -> frozenset[str]:
        """Every field of the image this shape knows: declared or left out (DESIGN: `not declared yet`)."""
        return frozenset([str(c["source"])[2:] for c in self.columns] + list(self.left_out))

    def as_json(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "primary_key": list(self.primary_key),
            "left_out": dict(sorted(self.left_out.items())),
        } | ({"conflict": self.conflict} if self.conflict else {})

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TableShape:
        return cls(
            tuple(body["columns"]),
            tuple(body["primary_key"]),
            dict(body.get("left_out", {})),
            body.get("conflict"),
        )


def shape(key_schema: dict | None, value_schema: dict) -> TableShape:
    """The table's shape from one change's key and value schema blocks (the `schema` of each)."""
    after = _after(value_schema)
    columns: list[dict[str, Any]] = []
    left_out: dict[str, str] = {}
    by_name: dict[str, str] = {}
    for f in after.get("fields") or []:
        source_name = str(f.get("field"))
        declared, why = _type(f)
        if declared is None:
            left_out[source_name] = why
            continue
        name = source_name.lower()
        # ASCII names only: the column's `source` is then `$.<field>`, one step as the path reads it.
        if not _FIELD.fullmatch(source_name) or not names.column(name):
            left_out[source_name] = "its name is not a column name (lower-case letters, digits and _)"
            continue
        if name in by_name:
            raise SchemaBlockError(
                f"fields {by_name[name]!r} and {source_name!r} would both be column {name!r}; declare this "
                "table under members: with its own columns, or leave it out of database.tables"
            )
        by_name[name] = source_name
        column: dict[str, Any] = {"name": name, "type": declared, "source": "$." + source_name}
        if not f.get("optional", True):
            column["required"] = True
        columns.append(column)
    key_fields = [str(f.get("field")) for f in ((key_schema or {}).get("fields") or [])]
    if not key_fields:
        raise SchemaBlockError(
            "its change records have no key, so the table has no primary key Debezium knows of: give it one, "
            "or set Debezium's message.key.columns, or name it under members: {<schema>.<table>: "
            "{primary_key: [...]}}"
        )
    missing = [k for k in key_fields if k not in by_name.values()]
    if missing:
        why = ", ".join(left_out.get(k, "absent from the value") for k in missing)
        raise SchemaBlockError(f"key field(s) {missing} are not declared columns ({why})")
    key = tuple(next(n for n, s in by_name.items() if s == k) for k in key_fields)
    return TableShape(tuple(columns), key, left_out)


def _after(value_schema: dict) -> dict:
    if value_schema.get("type") != "struct":
        raise SchemaBlockError("its value schema is not a struct: not Debezium's change envelope")
    for f in value_schema.get("fields") or []:
        if f.get("field") == "after" and f.get("type") == "struct":
            return f
    raise SchemaBlockError("its value schema has no `after` struct: not Debezium's change envelope")


def _type(f: dict) -> tuple[str | None, str]:
    """The declared type of one Connect field, or None and why it has none."""
    kind, semantic = f.get("type"), f.get("name")
    params = f.get("parameters") or {}
    if kind == "array":
        element, why = _type(f.get("items") or {})
        if element is None or element in ("jsonb", "bytea") or element.endswith("[]"):
            return None, f"an array of {why or element}, and arrays hold scalars other than jsonb and bytea"
        return f"{element}[]", ""
    if semantic is not None:
        if semantic in _NAMED:
            return _NAMED[semantic], ""
        if semantic == "io.debezium.time.Timestamp":
            return None, (
                "a timestamp in milliseconds (a timestamp(0..3) column under time.precision.mode=adaptive): "
                "set time.precision.mode=adaptive_time_microseconds"
            )
        if semantic == "org.apache.kafka.connect.data.Decimal":
            return None, (
                "a Decimal in bytes (decimal.handling.mode=precise): set decimal.handling.mode=string"
            )
        return None, f"{semantic} has no declared type"
    if kind == "string" and str(params.get(_SOURCE_TYPE, "")).upper() in ("NUMERIC", "DECIMAL"):
        return _numeric(params), ""
    if kind in _PLAIN:
        return _PLAIN[kind], ""
    return None, f"a Connect {kind} has no declared type"


def _numeric(params: dict) -> str:
    """numeric(p,s) where the source column has a precision a declared numeric holds; text otherwise (an
    unbounded numeric keeps its exact digits as text)."""
    try:
        precision = int(params.get("__debezium.source.column.length", 0))
        scale = int(params.get("__debezium.source.column.scale", 0))
    except (TypeError, ValueError):
        return "text"
    if 0 < precision <= _MAX_PRECISION and 0 <= scale <= precision:
        return f"numeric({precision},{scale})"
    return "text"
