"""Debezium's JSON change check compiled: msgspec decodes and types the envelope in C.

The envelope (`{"schema": ..., "payload": {...}}` or the payload alone) is one `msgspec.Struct` per
declaration: `op` a Literal of c, r, u, d, t; `before` and `after` a Struct of the declared columns (by their
top-level key); `source` a Struct of Debezium's PostgreSQL source block (`lsn`, `ts_ms` read, the others
decoded only to be counted); every other known member of Debezium's envelope decoded as any JSON value. What
C cannot finish, Python does with the Python check's own functions (eosflow.schema.changes and
eosflow.schema.record): the placeholder test, Debezium's value forms (`_form`), each type's accept and the
column's rules; a MicroTimestamp and a Date become their datetime and date directly (what the ISO text
`_form` writes reads back as), and a jsonb's JSON text is read by msgspec with the same `Decimal` for its
floats as `_form`'s decoder, `_form` itself where msgspec refuses the text or it may nest deeply. Two
storability rules hold there by construction and are not run: such an instant is in UTC within years
1-9999, and a jsonb text msgspec read without a `\\u0000` escape holds no NUL.

As eosflow.schema.compiled, the fast path only ever answers "a valid change, typed so"; every other record
(rejected, a TOAST placeholder, a form only the Python check reads, a `payload` without its `schema`) it
answers None and `ChangeCheck` runs its Python check, which gives every verdict and reason. So what must
hold is that the fast path never accepts a record the Python check rejects, nor types one otherwise
(tests/unit/schema/test_change_check_compiled.py holds the two to the same answers, Python types included).

What the Python check refuses as "not JSON", msgspec refuses too (malformed JSON, NaN and the infinities,
trailing data, a document that is not an object, lone surrogates; invalid UTF-8 goes through Python's strict
codec first), except duplicate keys, which msgspec resolves silently (the last one wins), and nesting, which
it allows deeper. Duplicates are counted, with eosflow.schema.compiled's colon count: the value's ':'
characters plus its `\\u003a` escapes are at least its members plus the colons in its strings (keys
included), equal to them unless an escaped backslash precedes a `u003a`; msgspec's re-encoding of the
decoded envelope (in C: one ':' after each key, none escaped in a string) holds exactly the decoded members
and the colons of their strings. Equal counts mean every member was decoded and none lost to a duplicate.
Otherwise (members no field names, such as another connector's source fields, or a duplicate), the whole
document is decoded again as generic objects and counted the same way (eosflow.schema.compiled's second
step), and an unequal count leaves the record to the Python check. A value with more than MAX_DEPTH '{' and
'[' always takes that second step, which walks it and refuses nesting past MAX_DEPTH. The schema block is
kept as its text (msgspec.Raw) and checked on its own by that second step, once per distinct block (a
table's changes share one): no duplicate key, no escaped colon, no nesting past MAX_DEPTH; the rest of the
value (the value without the block's bytes) is then counted against the envelope re-encoded without it.

A tombstone's key (Debezium's key, a JSON object of the key columns, its schema block or not) is read by
`json.loads` in the Python check: duplicates resolved the same way, floats as `float`, so msgspec decodes
it with `float_hook=float` and no count; a non-ASCII key, or one that may nest deeply, is left to it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from eosflow.schema.compiled import MAX_DEPTH, whole_count
from eosflow.schema.debezium_values import _EPOCH, _MAX_LSN, _PLACEHOLDER_B64, OPS, PLACEHOLDER, _form
from eosflow.schema.declaration import Column, RecordSchema
from eosflow.schema.record import _INLINE_ACCEPT, _constraints, _rules
from eosflow.schema.types import _UUID, BAD, json_float

if TYPE_CHECKING:
    from eosflow.schema.types import Value

_DAY_ZERO = date(1970, 1, 1)
_SCHEMA_AT = len(b'{"schema":')  # where Kafka's JsonConverter writes the schema block
# Debezium's envelope and PostgreSQL source block (3.x): every member the common record holds is a field,
# so that its count needs no second decode. A connector's other fields are counted by the second step.
_ENVELOPE = ("transaction", "ts_ms", "ts_us", "ts_ns")
_SOURCE = (
    "version",
    "connector",
    "name",
    "ts_ms",
    "snapshot",
    "db",
    "sequence",
    "ts_us",
    "ts_ns",
    "schema",
    "table",
    "txId",
    "lsn",
    "xmin",
    "origin",  # 3.6's, for logical replication's origin
    "origin_lsn",
)
# What msgspec refuses in a field's name (as eosflow.schema.compiled): a declaration reading such a key is
# left to the Python check.
_UNNAMEABLE = frozenset('\\"').union(map(chr, range(0x20)))
_INLINE = frozenset(_INLINE_ACCEPT)  # text, uuid, bigint, integer, boolean: tested inline, as record's typed


def _microseconds(v: int) -> datetime:
    """io.debezium.time.MicroTimestamp as the datetime `instant` reads from the ISO text `_form` writes: in
    UTC, within years 1-9999, so storable (`storable_instant`) by construction."""
    return _EPOCH + timedelta(0, 0, v)  # OverflowError: the Python check decides


def _days(v: int) -> date:
    """io.debezium.time.Date as the date `_date` reads from the ISO text `_form` writes."""
    return _DAY_ZERO + timedelta(v)


def _millis(raw: object) -> datetime | None:
    """changes._millis, with positional arguments (a keyword costs a third of the call)."""
    if type(raw) is not int:
        return None
    try:
        return _EPOCH + timedelta(0, 0, 0, raw)
    except OverflowError:
        return None


def _is_placeholder(v: Value) -> bool:
    t = type(v)
    if t is str:
        return v in (PLACEHOLDER, _PLACEHOLDER_B64)
    return t is list and len(v) == 1 and v[0] == PLACEHOLDER


_JSON_TEXT = msgspec.json.Decoder(float_hook=Decimal).decode


def _jsonb(v: object) -> tuple[object, bool]:
    """io.debezium.data.Json's text read as `_form` reads it (json with Decimal floats): by msgspec when
    it takes the text, which then reads it the same (duplicates: the last value, in the first one's
    place); json itself for what msgspec refuses (NaN, a lone surrogate) or what may nest deeply. And
    whether the value is storable as jsonb already: msgspec refuses a raw control character, so without
    a \\u0000 escape no string of it holds a NUL, and its numbers are ints and Decimals (no NaN, no bytes)."""
    if type(v) is not str:
        return v, False
    if v.count("{") + v.count("[") <= MAX_DEPTH:
        try:
            return _JSON_TEXT(v), "\\u0000" not in v
        except msgspec.DecodeError:
            pass
    return _form("jsonb", v), False


def _annotation(column: Column) -> Any:  # a type built at run time, for msgspec
    """The msgspec type of a column's field: what C decodes exactly as json would, else any JSON value."""
    declared = column.type.declared
    if column.type.text_from is not None:
        return Any  # text that takes its old type's values too, as their text: the accept decides
    if declared in ("text", "uuid"):
        return str
    if declared in ("bigint", "integer"):
        return int
    if declared == "boolean":
        return bool
    if declared in ("timestamptz", "date"):
        return int | str  # MicroTimestamp and Date as integers; ZonedTimestamp (or a date's text) as text
    return Any  # numeric, double, jsonb, bytea, arrays: floats through the Python check's own parse_float


def _column_lines(i: int, column: Column, required: bool, scope: dict[str, Any]) -> list[str]:
    """Lines taking field f<i> of the image `img` into v<i>, refusing (return None) what the Python
    check would not take as it is: missing when required, a placeholder, a failed accept or rule."""
    v, declared = f"v{i}", column.type.declared
    body: list[str] = []
    if declared in ("text", "uuid"):
        body += [f"if {v} == P or {v} == P64:", "    return None"]
    if declared in _INLINE and column.type.text_from is None:  # as record._compile_typed: inline
        tests = [_INLINE_ACCEPT[declared].format(v=v), *_constraints(column, v, i, scope)]
    else:
        scope[f"accept{i}"] = column.type.accept
        rules = []
        for k, rule in enumerate(_rules(column)):  # the first is the type's storability
            scope[f"rule{i}_{k}"] = rule
            rules.append(f"rule{i}_{k}({v}) is None")
        tests = [f"{v} is not BAD", *rules]
        if declared in ("timestamptz", "date"):
            # From Debezium's integer form, an instant in UTC or a date: storable, its other rules only.
            convert = "microseconds" if declared == "timestamptz" else "days"
            body += [f"if type({v}) is int:", f"    {v} = {convert}({v})"]
            if rules[1:]:
                body += [f"    if not ({' and '.join(rules[1:])}):", "        return None"]
            body += [
                f"elif {v} == P or {v} == P64:",
                "    return None",
                "else:",
                f"    {v} = accept{i}({v})",
                f"    if not ({' and '.join(tests)}):",
                "        return None",
            ]
            tests = []
        elif declared == "jsonb":
            body += [f"if is_placeholder({v}):", "    return None", f"{v}, storable = jsonb({v})"]
            body.append(f"{v} = accept{i}({v})")
            tests = [f"{v} is not BAD", f"(storable or {rules[0]})", *rules[1:]]
        else:
            convert = f"form({declared!r}, {v})"
            body += [f"if is_placeholder({v}):", "    return None", f"{v} = accept{i}({convert})"]
    if tests:
        body += [f"if not ({' and '.join(tests)}):", "    return None"]
    missing = "    return None" if required else f"    {v} = None"
    return [
        f"{v} = img.f{i}",
        f"if {v} is UNSET or {v} is None:",
        missing,
        "else:",
        *(f"    {b}" for b in body),
    ]


def _image_function(columns: tuple[Column, ...], required: tuple[bool, ...], name: str) -> Callable:
    """An image Struct -> its columns' typed values, or None where the Python check must decide."""
    scope: dict[str, Any] = {  # exec's namespace: what the generated source names, then what it defines
        "UNSET": UNSET,
        "BAD": BAD,
        "P": PLACEHOLDER,
        "P64": _PLACEHOLDER_B64,
        "is_placeholder": _is_placeholder,
        "microseconds": _microseconds,
        "days": _days,
        "jsonb": _jsonb,
        "form": _form,
        "_UUID": _UUID.fullmatch,  # as record._compile_typed's scope: _INLINE_ACCEPT's uuid test calls it
        "__name__": __name__,
    }
    lines = [f"def {name}(img):"]
    for i, column in enumerate(columns):
        lines += [f"    {line}" for line in _column_lines(i, column, required[i], scope)]
    lines.append(f"    return [{', '.join(f'v{i}' for i in range(len(columns)))}]")
    exec("\n".join(lines), scope)  # noqa: S102 - the source is built above from the declaration's types
    return scope[name]


def _image_struct(
    columns: tuple[Column, ...], extra: list[tuple] | None = None, known: frozenset[str] | None = None
) -> type:
    """The image's Struct; with `extra` fields, a tombstone's key, which holds no other member (json.loads
    reads what msgspec would skip unchecked, such as an integer of more than 4300 digits). `known`: a
    database member's image fields (RecordSchema.image_fields): any other field fails the decode, and the
    Python check rejects the record as `not declared yet`."""
    fields = [(f"f{i}", _annotation(c) | None | UnsetType, UNSET) for i, c in enumerate(columns)]
    declared = {c.path[0] for c in columns}
    others = sorted((known or frozenset()) - declared)
    return msgspec.defstruct(
        "Image" if extra is None else "Key",
        [*fields, *((f"o{i}", Any, UNSET) for i in range(len(others))), *(extra or [])],
        # each column named by one key (compile_changes takes no other declaration)
        rename={f"f{i}": c.path[0] for i, c in enumerate(columns)}  # type: ignore[arg-type]
        | {f"o{i}": n for i, n in enumerate(others)},
        kw_only=True,
        # The source table's other columns: counted by the second step.
        forbid_unknown_fields=extra is not None or known is not None,
        gc=False,
    )


def _any_fields(names: tuple[str, ...]) -> list[tuple]:
    return [(name, Any, UNSET) for name in names]


class _Whole:
    """The decoders eosflow.schema.compiled's second step (`whole_count`) takes."""

    def __init__(self) -> None:
        self.decode_any = msgspec.json.Decoder().decode
        self.encode = msgspec.json.Encoder().encode


class CompiledChanges:
    """The fast path of a `changes: debezium`, `format: json` declaration's ChangeCheck."""

    def __init__(self, schema: RecordSchema, columns: tuple[Column, ...]) -> None:
        self.schema = schema
        self.columns = columns
        self.width = len(columns)
        key = set(schema.primary_key)
        self.key_indexes = tuple(i for i, c in enumerate(columns) if c.name in key)
        self.full = _image_function(columns, tuple(c.required or c.name in key for c in columns), "full")
        # A delete's image (and the key of a tombstone) may hold only the key.
        self.loose = _image_function(columns, tuple(c.name in key for c in columns), "loose")
        image = _image_struct(columns, known=schema.image_fields)
        source = msgspec.defstruct("Source", _any_fields(_SOURCE), kw_only=True, gc=False)
        envelope = [
            ("op", Literal[OPS] | UnsetType, UNSET),
            ("before", image | None | UnsetType, UNSET),
            ("after", image | None | UnsetType, UNSET),
            ("source", source | None | UnsetType, UNSET),
            *_any_fields(_ENVELOPE),
        ]
        payload = msgspec.defstruct("Envelope", envelope, kw_only=True, gc=False)
        top = msgspec.defstruct(
            "Document",
            # The schema block as its text: the same for every change of a table's version, so it is checked
            # once (`_schema_colons`) instead of decoded and counted with every record.
            [*envelope, ("schema", msgspec.Raw | UnsetType, UNSET), ("payload", payload | UnsetType, UNSET)],
            kw_only=True,
            gc=False,
        )
        hook = Decimal if schema.exact_decimals else json_float  # the Python check's parse_float
        # Any: the Structs are built at run time from the declaration, their fields unknown to mypy
        self._decode: Callable[[bytes], Any] = msgspec.json.Decoder(top, float_hook=hook).decode
        self._encode = msgspec.json.Encoder().encode
        self._whole = whole_count(_Whole(), ())  # type: ignore[arg-type]
        self._schemas: dict[bytes, int] = {}  # schema blocks checked: their ':' characters
        self._last_schema, self._last_colons = b"", 0  # the last one: compared, not hashed
        names = {c.path[0] for c in columns}
        if names.isdisjoint({"schema", "payload"}):
            payload_key = _image_struct(columns, [])
            key_doc = _image_struct(
                columns, [("schema", Any, UNSET), ("payload", payload_key | None | UnsetType, UNSET)]
            )
            # json.loads' floats
            self._decode_key: Callable[[bytes], Any] | None = msgspec.json.Decoder(
                key_doc, float_hook=float
            ).decode
        else:
            self._decode_key = None

    def __reduce__(self) -> tuple[type, tuple[RecordSchema, tuple[Column, ...]]]:
        # Pickled as its declaration and rebuilt where it is loaded (Spark ships a check by value): msgspec's
        # types and decoders do not pickle.
        return CompiledChanges, (self.schema, self.columns)

    def envelope(self, value: bytes) -> list | None:
        """A Debezium JSON value (not a tombstone, within the size limit) -> its typed columns and
        [op, lsn, ts, None], or None: the Python check decides."""
        if not value.isascii():
            try:
                value.decode("utf-8")  # strict, as the Python check's
            except UnicodeDecodeError:
                return None
        try:
            doc = self._decode(value)
            rest, decoded, schema_colons = value, doc, 0
            if doc.schema is not UNSET:
                # Checked on its own, once per distinct block; the rest of the value is counted without it
                # (a schema block is most of a value: Debezium's for 17 columns is 10 kB).
                schema = bytes(doc.schema)
                if schema == self._last_schema:
                    schema_colons = self._last_colons
                else:
                    schema_colons = self._schemas.get(schema, -1)
                    if schema_colons < 0 and (schema_colons := self._schema_colons(schema)) < 0:
                        return None
                    self._last_schema, self._last_colons = schema, schema_colons
                # Where JsonConverter writes it (`{"schema":` first), else the first copy of these bytes: any
                # copy leaves the same rest (find prepares a 10 kB needle at a cost above the decode).
                at = _SCHEMA_AT if value.startswith(schema, _SCHEMA_AT) else value.find(schema)
                if at < 0:
                    return None
                rest = value[:at] + value[at + len(schema) :]
                decoded = msgspec.structs.replace(doc, schema=UNSET)
            c = rest.count(b":")
            if b"\\u003" in rest:  # a colon escaped (or an escaped backslash before u003a: counted too)
                c += rest.count(b"\\u003a") + rest.count(b"\\u003A")
            # Without the schema block, its member's ':' is missing from the re-encoding: counted apart.
            encoded = self._encode(decoded).count(b":") + (decoded is not doc)
            braces = rest.count(b"{") + rest.count(b"[")
            if (c != encoded or braces > MAX_DEPTH) and c + schema_colons != self._whole(value):
                return None  # a duplicate key, or a document msgspec reads otherwise: the Python check's
            payload = doc.payload
            if payload is not UNSET:
                if doc.schema is UNSET:
                    return None  # a payload without a schema block is no envelope of the converter's
                doc = payload
            op = doc.op
            if op is UNSET:
                return None
            source = doc.source
            if source is UNSET or source is None:
                lsn, raw_ts = None, doc.ts_ms
            else:
                lsn, raw_ts = source.lsn, source.ts_ms
                if lsn is UNSET or lsn is None:
                    lsn = None
                elif type(lsn) is not int or not 0 <= lsn <= _MAX_LSN:
                    return None
                if raw_ts is UNSET:
                    raw_ts = doc.ts_ms
            if op == "t":
                return [*([None] * self.width), op, lsn, _millis(raw_ts), None]
            image = doc.before if op == "d" else doc.after
            if image is UNSET or image is None:
                return None
            typed = (self.loose if op == "d" else self.full)(image)
            if typed is None:
                return None
            typed += (op, lsn, _millis(raw_ts), None)
            return typed
        except Exception:  # any refusal, nesting too deep among them: the Python check decides
            return None

    def _schema_colons(self, schema: bytes) -> int:
        """A schema block's ':' characters once it is known to hold no duplicate key, no ':' escaped and no
        nesting past MAX_DEPTH (the second step's count of it alone); -1 if it may."""
        colons = schema.count(b":")
        if b"\\u003" in schema or colons != self._whole(schema):  # _TooDeep: the caller's refusal
            return -1
        if len(self._schemas) >= 64:  # a table's versions, a few topics: more is no stream of one table
            self._schemas.clear()
        self._schemas[schema] = colons
        return colons

    def tombstone(self, key: bytes) -> list | None:
        """A tombstone's key -> the key columns' values (NULL elsewhere) and ["-", None, None, None], or
        None: the Python check decides (it also makes a key it cannot read NULLs)."""
        decode = self._decode_key
        if decode is None or not key or not key.isascii() or key.count(b"{") + key.count(b"[") > MAX_DEPTH:
            return None
        try:
            doc = decode(key)
            payload = doc.payload
            typed = self.loose(doc if payload is UNSET or payload is None else payload)
        except Exception:  # any refusal: the Python check decides
            return None
        if typed is None:
            return None
        values: list = [None] * self.width
        for i in self.key_indexes:
            values[i] = typed[i]
        values += ("-", None, None, None)
        return values


def compile_changes(schema: RecordSchema, columns: tuple[Column, ...]) -> CompiledChanges | None:
    """The fast path of a Debezium JSON change check whose image columns are `columns`; None for a
    declaration it does not take: a column read from a nested path, two columns on one key, a key no
    Struct field can be named, a primary key column read from another key than its name."""
    if schema.changes != "debezium" or schema.format != "json":
        return None
    if any(len(c.path) != 1 or type(c.path[0]) is not str or c.meta is not None for c in columns):
        return None
    keys = [str(c.path[0]) for c in columns]  # one name each: refused above otherwise
    if len(set(keys)) != len(keys) or any(not _UNNAMEABLE.isdisjoint(k) for k in keys):
        return None
    if any(c.path != (c.name,) for c in columns if c.name in schema.primary_key):
        return None  # the Python check tests the key by the column's name
    return CompiledChanges(schema, columns)
