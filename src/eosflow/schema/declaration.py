"""A pipeline's record schema as declared in pipelines.yml: format, key, columns, business key.

Parsing refuses anything it cannot honour before a record is read, with the column and the
setting named: an unknown type, a pattern that does not compile (or that RE2, which runs every
pattern in time linear in the value, cannot run: eosflow.schema.patterns), an enum value of the wrong type,
a JSON path it cannot follow, a column name that would collide with eosflow's own columns.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from enum import StrEnum

from eosflow.schema.patterns import Pattern, PatternError
from eosflow.schema.types import BAD, ColumnType, UnknownTypeError, Value, parse_type


class RecordFormat(StrEnum):
    """How a record's value is written (`format:`); its text is what users declare and read in messages."""

    JSON = "json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    TEXT = "text"
    BYTES = "bytes"

    def __repr__(self) -> str:  # messages quote a format as the user declared it: 'avro', not the member
        return repr(self.value)


FORMATS: tuple[str, ...] = tuple(f.value for f in RecordFormat)  # as text, for messages and docs
# Their writer schemas come from a schema registry (and a key may be in one of them: `key_format`).
REGISTRY_FORMATS: tuple[RecordFormat, ...] = (RecordFormat.AVRO, RecordFormat.PROTOBUF)
KEY_KINDS = ("text", "bytes")  # or a declared scalar type: the key's text read as that type
# Columns every target has besides the declared ones (eosflow.schema.ddl).
RESERVED_COLUMNS = frozenset(
    {
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        "kafka_key",
        "kafka_headers",
        "batch_id",
        "transform_version",
        "declaration_version",
        "pipeline",
        "error",
        "raw_key",
        "raw_value",
        # A change stream's columns (eosflow.schema.changes), in its changelog.
        "change_op",
        "change_lsn",
        "change_ts",
        "change_unchanged",
        "change_old_key",
        "deleted_at",
    }
)
# How a change stream's records are changes (docs/DESIGN.md, "Change streams").
CHANGES = ("debezium", "keyed")
SCHEMA_ID_SOURCE = "@schema_id"  # a column's source: the value's schema id, from its wire-format header
_COLUMN_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_PATH_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[\s*(?:'([^']*)'|\"([^\"]*)\"|([0-9]+))\s*\]")
_COLUMN_KEYS = ("name", "type", "required", "source", "enum", "pattern", "min", "max", "text_from")
# A Python transform: an import path (package.module:function) or an entry point's name.
_TRANSFORM = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*|[A-Za-z0-9_.-]+")


class DeclarationError(ValueError):
    """A declaration eosflow cannot honour; the message names the column and the setting."""


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    required: bool = False
    path: tuple[str | int, ...] = ()  # steps into the JSON document: keys and array indexes
    source: str = ""  # the path as declared, for messages ("$.customer.id")
    enum: frozenset | None = None
    enum_text: str = ""  # the enum as the declaration lists it, for messages
    pattern: Pattern | None = None  # RE2's search (eosflow.schema.patterns)
    min: Value = None  # a number of the column's type (ints, floats or Decimals)
    max: Value = None
    meta: str | None = None  # "schema_id": the value's registry schema id, not a field of the record


@dataclass(frozen=True)
class RecordSchema:
    """What a pipeline's records hold and how each becomes a row of its target."""

    columns: tuple[Column, ...]
    format: RecordFormat = RecordFormat.JSON
    key: str = "text"  # text | bytes | a scalar type's spelling (then key_type is that type)
    key_type: ColumnType | None = None
    key_format: RecordFormat | None = None  # avro | protobuf: the key in the Confluent wire format, decoded
    business_key: str | None = None
    transform: str | None = None  # a Python function making the rows (eosflow.schema.user_transform)
    text_pattern: Pattern | None = None  # format: text, parsed into columns by named groups
    # A change stream: how records are changes (CHANGES) and the row's primary key (declared columns). Its
    # columns then end with the change's own (eosflow.schema.changes.CHANGE_COLUMNS, meta "change").
    changes: str | None = None
    primary_key: tuple[str, ...] = ()
    # A database entry's member: every field of a change's image its discovery knows (declared or left
    # out); an image holding another is rejected as `not declared yet`, never dropped. None: any field.
    image_fields: frozenset[str] | None = None
    # The declaration as written, canonical JSON: what a declaration version is (eosflow.declarations).
    canonical: str = field(default="{}", compare=False)

    @property
    def exact_decimals(self) -> bool:
        return any(c.type.exact_decimals for c in self.columns)


def parse_schema(spec: dict, where: str) -> RecordSchema:
    """The RecordSchema of a pipeline's `format`, `key`, `columns` and `business_key` settings."""
    raw_format = spec.get("format", "json")
    if raw_format not in FORMATS:
        raise DeclarationError(f"{where}: format {raw_format!r} unknown; one of {list(FORMATS)}")
    fmt = RecordFormat(raw_format)
    raw_key_format = spec.get("key_format")
    registry_formats = [f.value for f in REGISTRY_FORMATS]
    if raw_key_format is not None and raw_key_format not in registry_formats:
        raise DeclarationError(
            f"{where}: key_format {raw_key_format!r} unknown; one of {registry_formats} (a key in the "
            "Confluent wire format), or leave it out to read the key's bytes as `key` says"
        )
    key_format = None if raw_key_format is None else RecordFormat(raw_key_format)
    key, key_type = _key(spec.get("key", "text"), where)
    if key_format is not None and key_type is None:  # a decoded key is typed: text and bytes too
        key_type = parse_type("bytea" if key == "bytes" else "text")
    raw_columns = spec.get("columns")
    if not isinstance(raw_columns, list) or not raw_columns:
        raise DeclarationError(
            f"{where}: columns must be a list of at least one column, "
            "e.g. [{name: id, type: uuid, required: true}]"
        )
    columns = tuple(_column(c, f"{where}: column {i + 1}") for i, c in enumerate(raw_columns))
    names = [c.name for c in columns]
    if duplicated := sorted({n for n in names if names.count(n) > 1}):
        raise DeclarationError(f"{where}: column name(s) declared twice: {duplicated}")
    business_key = spec.get("business_key")
    if business_key is not None:
        if business_key not in names:
            raise DeclarationError(
                f"{where}: business_key {business_key!r} is not a declared column; declared: {names}"
            )
        column = columns[names.index(business_key)]
        if not column.required or column.type.is_array or column.type.declared == "jsonb":
            raise DeclarationError(
                f"{where}: business_key {business_key!r} must be a required scalar column "
                "(I6 deduplicates on it; a NULL or a jsonb value cannot identify a record)"
            )
    transform = spec.get("transform")
    if transform is not None:
        if not isinstance(transform, str) or not _TRANSFORM.fullmatch(transform):
            raise DeclarationError(
                f"{where}: transform {transform!r} must be an import path such as mypackage.module:function, "
                "or the name of an eosflow.transforms entry point"
            )
        if fmt != "json":
            raise DeclarationError(
                f"{where}: a transform receives each record's raw bytes, so format {fmt!r} would never be "
                "read: drop format (the function decodes the value) or drop transform"
            )
        paths = [c.name for c in columns if c.path != (c.name,)]
        if paths:
            raise DeclarationError(
                f"{where}: column(s) {paths} have a source, but with a transform the function makes every "
                "column: drop source"
            )
    text_pattern = _unstructured(fmt, spec, columns, where)
    changes, primary_key = _changes(spec, fmt, columns, transform, where)
    if changes is not None:
        columns = columns + CHANGE_COLUMNS
    written = {k: spec.get(k) for k in ("format", "key", "columns", "business_key", "transform")}
    # Only where set: declarations written before these keys existed keep their versions.
    if text_pattern is not None:
        written["text_pattern"] = text_pattern.pattern
    if key_format is not None:
        written["key_format"] = key_format
    if changes is not None:
        written |= {"changes": changes, "primary_key": list(primary_key)}
    return RecordSchema(
        columns=columns,
        format=fmt,
        key=key,
        key_type=key_type,
        key_format=key_format,
        business_key=business_key,
        transform=transform,
        text_pattern=text_pattern,
        changes=changes,
        primary_key=primary_key,
        canonical=json.dumps(written, sort_keys=True, default=str),
    )


# A change stream's own columns, after the declared ones (filled by eosflow.schema.changes.ChangeCheck).
CHANGE_COLUMNS: tuple[Column, ...] = (
    Column("change_op", parse_type("text"), meta="change"),
    Column("change_lsn", parse_type("bigint"), meta="change"),
    Column("change_ts", parse_type("timestamptz"), meta="change"),
    Column("change_unchanged", parse_type("text[]"), meta="change"),
    # A create after a primary-key update: the old key (Debezium's __debezium.oldkey header), whose history
    # holds the values of the columns the update left unchanged.
    Column("change_old_key", parse_type("jsonb"), meta="change"),
)


def _changes(
    spec: dict, fmt: str, columns: tuple[Column, ...], transform: str | None, where: str
) -> tuple[str | None, tuple[str, ...]]:
    """`changes` and `primary_key`: both or neither; the key's columns declared, required, comparable."""
    changes, raw_key = spec.get("changes"), spec.get("primary_key")
    if changes is None:
        if raw_key is not None:
            raise DeclarationError(
                f"{where}: primary_key names a change stream's key; add changes: debezium (Debezium's change "
                "events) or changes: keyed (the key is the primary key, a null value deletes)"
            )
        return None, ()
    if changes not in CHANGES:
        raise DeclarationError(f"{where}: changes {changes!r} unknown; one of {list(CHANGES)}")
    if transform is not None:
        raise DeclarationError(f"{where}: changes reads the records itself; drop transform")
    readable = ("json", "avro") if changes == "debezium" else ("json", "avro", "protobuf")
    if fmt not in readable:
        raise DeclarationError(
            f"{where}: changes: {changes} reads format {' or '.join(readable)} values, not {fmt!r}"
        )
    keys = [raw_key] if isinstance(raw_key, str) else raw_key
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise DeclarationError(
            f"{where}: changes: {changes} needs primary_key, the declared column(s) that identify a row, "
            "e.g. primary_key: [id]"
        )
    by_name = {c.name: c for c in columns}
    for name in keys:
        column = by_name.get(name)
        if column is None:
            raise DeclarationError(
                f"{where}: primary_key column {name!r} is not declared; declared: {sorted(by_name)}"
            )
        if not column.required or column.meta is not None or column.type.is_array:
            raise DeclarationError(
                f"{where}: primary_key column {name!r} must be a required scalar column (a row is found "
                "by it)"
            )
        if column.type.declared in ("jsonb", "bytea", "double"):
            raise DeclarationError(
                f"{where}: primary_key column {name!r} is {column.type.declared}, which has no exact "
                "equality to find a row by: use text, uuid, an integer, numeric, boolean, timestamptz or date"
            )
    if len(set(keys)) != len(keys):
        raise DeclarationError(f"{where}: primary_key names a column twice: {keys}")
    return changes, tuple(keys)


def _unstructured(fmt: str, spec: dict, columns: tuple[Column, ...], where: str) -> Pattern | None:
    """`format: text` and `format: bytes`: a value with no fields, so no column has a source. The
    whole value goes into the one declared column, or (text) `text_pattern`'s named groups into the
    columns of their names. Returns the compiled pattern."""
    raw = spec.get("text_pattern")
    if raw is not None and fmt != "text":
        raise DeclarationError(f"{where}: text_pattern parses format: text values; this pipeline is {fmt!r}")
    if fmt not in ("text", "bytes"):
        return None
    for c in columns:
        if c.path != (c.name,):
            raise DeclarationError(
                f"{where}: column {c.name!r} has a source, but a {fmt} value has no fields: "
                + ("name the column as its group in text_pattern" if fmt == "text" else "drop source")
            )
        if fmt == "text" and (c.type.is_array or c.type.declared in ("jsonb", "bytea")):
            raise DeclarationError(
                f"{where}: column {c.name!r} is {c.type.declared}; a text value fills text, uuid, numbers, "
                "boolean, timestamptz and date columns (format: json reads JSON documents)"
            )
    if fmt == "bytes":
        if len(columns) != 1 or columns[0].type.declared != "bytea":
            raise DeclarationError(
                f"{where}: format: bytes lands each value, byte for byte, in one column of type bytea, "
                "e.g. columns: [{name: payload, type: bytea, required: true}]"
            )
        return None
    if raw is None:
        if len(columns) != 1:
            raise DeclarationError(
                f"{where}: format: text without text_pattern lands each value in one column; "
                f"{len(columns)} are declared. Declare one, or a text_pattern with a named group per column"
            )
        return None
    if not isinstance(raw, str):
        raise DeclarationError(f"{where}: text_pattern must be a regular expression, not {raw!r}")
    try:
        pattern = Pattern(raw)
    except PatternError as exc:
        raise DeclarationError(f"{where}: text_pattern {raw!r} {exc}") from None
    if missing := [c.name for c in columns if c.name not in pattern.groupindex]:
        raise DeclarationError(
            f"{where}: column(s) {missing} have no named group in text_pattern {raw!r}; add (?P<name>...) "
            "for each column"
        )
    return pattern


def _key(spec: object, where: str) -> tuple[str, ColumnType | None]:
    """`key`: text, bytes, or a scalar type whose text form the key holds (key: bigint, key: uuid)."""
    if spec in KEY_KINDS:
        return str(spec), None
    try:
        ctype = parse_type(spec)
    except UnknownTypeError:
        ctype = None
    if ctype is None or ctype.is_array:
        raise DeclarationError(
            f"{where}: key {spec!r} unknown; text (a UTF-8 key as text), bytes (any key exactly, as "
            "bytea), or a scalar column type the key's text is read as (uuid, bigint, integer, double, "
            "numeric(p,s), boolean, timestamptz, date, jsonb)"
        )
    return ctype.declared, ctype


def _column(spec: object, where: str) -> Column:
    if not isinstance(spec, dict):
        raise DeclarationError(f"{where}: expected a mapping such as {{name: id, type: text}}")
    if unknown := sorted(set(spec) - set(_COLUMN_KEYS)):
        raise DeclarationError(f"{where}: unknown setting(s) {unknown}; known: {list(_COLUMN_KEYS)}")
    name = spec.get("name")
    if not isinstance(name, str) or not _COLUMN_NAME.fullmatch(name):
        raise DeclarationError(
            f"{where}: name {name!r} must be lower-case letters, digits and _, starting with a letter or _, "
            "at most 63 characters (a Postgres column name that needs no quoting)"
        )
    where = f"{where} ({name})"
    if name in RESERVED_COLUMNS:
        raise DeclarationError(
            f"{where}: {name!r} is one of eosflow's own columns ({', '.join(sorted(RESERVED_COLUMNS))}); "
            f"name it otherwise and point source at the field, e.g. {{name: event_{name}, source: $.{name}}}"
        )
    try:
        ctype = parse_type(spec.get("type"))
    except UnknownTypeError as exc:
        raise DeclarationError(f"{where}: {exc}") from None
    if "text_from" in spec:
        ctype = _text_from(spec, ctype, where)
    required = spec.get("required", False)
    if type(required) is not bool:
        raise DeclarationError(f"{where}: required must be true or false, not {required!r}")
    source = spec.get("source", f"$.{name}")
    if source == SCHEMA_ID_SOURCE:
        return _schema_id_column(spec, name, ctype, where)
    path = parse_path(source, where)
    scalar = ctype.element or ctype
    column = Column(name=name, type=ctype, required=required, path=path, source=str(source))
    return Column(
        **{
            **column.__dict__,
            **_enum(spec, scalar, where),
            **_pattern(spec, scalar, where),
            **_bounds(spec, scalar, where),
        }
    )


def _text_from(spec: dict, ctype: ColumnType, where: str) -> ColumnType:
    """`type: text` with `text_from: <type>`: a text column that was of that type, and takes its values."""
    from eosflow.schema.text_from import text_from

    if ctype.declared != "text":
        raise DeclarationError(
            f"{where}: text_from goes with type: text (a column made text that was of another type), not "
            f"with type: {ctype.declared}"
        )
    try:
        return text_from(str(spec["text_from"]))
    except UnknownTypeError as exc:
        raise DeclarationError(f"{where}: {exc}") from None


def _schema_id_column(spec: dict, name: str, ctype: ColumnType, where: str) -> Column:
    """`source: "@schema_id"`: the id in a value's Confluent wire-format header (Avro, Protobuf, JSON
    Schema framing); NULL for a value without one, so never required."""
    if ctype.declared not in ("integer", "bigint") or spec.get("required", False):
        raise DeclarationError(
            f"{where}: a {SCHEMA_ID_SOURCE} column is an optional integer or bigint (NULL for a value "
            f"without a schema id), e.g. {{name: {name}, type: integer, source: '{SCHEMA_ID_SOURCE}'}}"
        )
    if rules := sorted(k for k in ("enum", "pattern", "min", "max") if k in spec):
        raise DeclarationError(f"{where}: a {SCHEMA_ID_SOURCE} column takes no rules, got {rules}")
    return Column(name=name, type=ctype, path=(), source=SCHEMA_ID_SOURCE, meta="schema_id")


def parse_path(source: object, where: str) -> tuple[str | int, ...]:
    """`$.a.b`, `$.a[0]`, `$['a b']` -> the steps ("a", "b"), ("a", 0), ("a b",)."""
    text = str(source)
    if not text.startswith("$"):
        raise DeclarationError(
            f"{where}: source {text!r} must be a JSON path starting with $, e.g. $.customer.id"
        )
    steps: list[str | int] = []
    at = 1
    while at < len(text):
        m = _PATH_STEP.match(text, at)
        if m is None:
            raise DeclarationError(
                f"{where}: source {text!r} cannot be followed at {text[at:]!r}; "
                "use .name, ['any name'] or [index] steps, e.g. $.items[0].sku"
            )
        name, single, double, index = m.groups()
        steps.append(
            int(index) if index is not None else next(s for s in (name, single, double) if s is not None)
        )
        at = m.end()
    if not steps:
        raise DeclarationError(
            f"{where}: source {text!r} names the whole record; point it at a field, e.g. $.id"
        )
    return tuple(steps)


def _enum(spec: dict, scalar: ColumnType, where: str) -> dict:
    if "enum" not in spec:
        return {}
    values = spec["enum"]
    if not isinstance(values, list) or not values:
        raise DeclarationError(f"{where}: enum must be a non-empty list of allowed values")
    if scalar.declared not in ("text", "uuid", "bigint", "integer", "boolean"):
        raise DeclarationError(f"{where}: enum applies to text, uuid, bigint, integer and boolean columns")
    typed = [scalar.accept(v) for v in values]
    if BAD in typed:
        bad = values[typed.index(BAD)]
        raise DeclarationError(f"{where}: enum value {bad!r} is not a {scalar.declared} ({scalar.expected})")
    return {"enum": frozenset(typed), "enum_text": ", ".join(str(v) for v in values)}


def _pattern(spec: dict, scalar: ColumnType, where: str) -> dict:
    if "pattern" not in spec:
        return {}
    if scalar.declared != "text":
        raise DeclarationError(f"{where}: pattern applies to text columns (and text[])")
    try:
        return {"pattern": Pattern(str(spec["pattern"]))}
    except PatternError as exc:
        raise DeclarationError(f"{where}: pattern {spec['pattern']!r} {exc}") from None


def _bounds(spec: dict, scalar: ColumnType, where: str) -> dict:
    bounds: dict[str, Value] = {}  # numbers of the column's type
    for key in ("min", "max"):
        if key not in spec:
            continue
        if not scalar.ordered:
            raise DeclarationError(f"{where}: {key} applies to bigint, integer, double and numeric columns")
        value = scalar.accept(spec[key])
        if value is BAD:
            raise DeclarationError(f"{where}: {key} {spec[key]!r} is not a {scalar.declared}")
        if isinstance(value, float) and not math.isfinite(value):  # YAML's .inf, .nan, 1.0e+400
            raise DeclarationError(
                f"{where}: {key} {spec[key]!r} is not a finite number (a NaN bound holds nothing back, an "
                f"infinite one says nothing): write a number, or leave {key} out"
            )
        bounds[key] = value
    if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
        raise DeclarationError(f"{where}: min {spec['min']!r} is above max {spec['max']!r}")
    return bounds
