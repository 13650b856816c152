"""One record value -> its declared columns typed, or the first check it fails, as a message.

Pure Python, no Spark: eosflow.transform's `BatchCheck` runs `RecordCheck` over the Arrow
batches Spark hands a Python task. Checks, in order; the first that fails is the row's only error:

1. ``null value``
2. ``oversized: <n> bytes > <max>``
3. ``not UTF-8``
4. ``not JSON`` (malformed, NaN/Infinity, duplicate keys, lone surrogates, trailing content, or
   not an object). A value in Confluent's wire format (magic byte 0 and a 4-byte schema id, what
   the JSON Schema serializers write) is read as the JSON after the header; JSON itself never
   starts with a NUL. For `format: avro`, 3 and 4 are one check, ``not Avro: <why>`` (no
   wire-format header, an unknown schema id, a schema that is not Avro or not a record, bytes that
   do not decode; eosflow.schema.avro), and the decoded record is checked as a JSON object would
   be; `format: protobuf` likewise, ``not Protobuf: <why>`` (eosflow.schema.protobuf); `format:
   text` is ``not UTF-8`` or ``not matching text_pattern``, and `format: bytes` takes any value
   (eosflow.schema.text)
5. ``missing field: <column>`` (a required column absent or JSON null; ``<column> ($.path)`` when
   its source is not the top-level field of its name), across all columns in declared order
6. ``mistyped field: <column> (expected <type>)``, likewise
7. ``invalid value: <column> (<why>)``: a value Postgres cannot store (eosflow.schema.types), then
   the column's enum, pattern, min and max

An optional column that is absent or JSON null is NULL. The Kafka columns' own checks (timestamp,
key, headers) are eosflow.transform's, before and after these.

A JSON record passing 1 and 2 goes first through the declaration's compiled fast path
(eosflow.schema.compiled: msgspec, in C), which only ever answers "valid, typed so"; any other
record is checked here as if there were none, so every verdict it does not give, and every reason,
is this module's. The Python check stays the reference the fast path is tested against
(tests/unit/schema/test_compiled_check.py), and `RecordCheck(..., compiled=False)` runs it alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from operator import call
from typing import TYPE_CHECKING

from eosflow.schema.avro import HEADER_BYTES, AvroDecoder, RegistryConfig
from eosflow.schema.compiled import compile_check
from eosflow.schema.declaration import REGISTRY_FORMATS, Column, RecordSchema
from eosflow.schema.types import BAD, ColumnType, for_each, json_float

if TYPE_CHECKING:
    from eosflow.schema.types import Value

_MISSING = None  # what a getter returns for an absent field; JSON null is treated the same
FRAMED = b"\x00"  # the magic byte of Confluent's wire format, before a 4-byte schema id
NO_SCHEMA_ID = "not JSON: a Confluent wire-format magic byte without the 4-byte schema id after it"


def _with_schema_ids(check_value, positions: tuple[int, ...]):
    """`check_value` whose typed values also hold, at `positions`, the schema id of the value's
    Confluent wire-format header (None without one)."""

    def check(value: bytes | None) -> tuple[str | None, list | None]:
        error, typed = check_value(value)
        if typed is not None:
            assert value is not None  # a missing value is an error, never typed
            framed = value[:1] == FRAMED and len(value) >= HEADER_BYTES
            schema_id = int.from_bytes(value[1:HEADER_BYTES], "big") if framed else None
            for i in positions:  # ascending: each lands where the declaration has it
                typed.insert(i, schema_id)
        return error, typed

    return check


def _decoder(schema: RecordSchema, registry: RegistryConfig | None) -> Callable[[bytes], tuple]:
    """The decoder of a format other than JSON: the value's bytes -> (None, document) or (reason, None)."""
    if schema.format in REGISTRY_FORMATS:
        if registry is None:
            raise ValueError(
                f"a {schema.format} pipeline needs a schema registry: set EOSFLOW_SCHEMA_REGISTRY_URL"
            )
        if schema.format == "avro":
            return AvroDecoder(registry)
        from eosflow.schema.protobuf import ProtobufDecoder

        return ProtobufDecoder(registry)
    from eosflow.schema.text import BytesDecoder, TextDecoder

    if schema.format == "bytes":
        return BytesDecoder(schema.columns)
    return TextDecoder(schema.columns, schema.text_pattern)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key")
    return obj


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


# One decoder per number mode: json.loads with options would build a new one per call.
_DECODERS = {
    # json_float: a number no double holds (1e400, 1e-400) stays a Decimal, which a double column
    # rejects by name instead of keeping infinity or 0.
    False: json.JSONDecoder(
        object_pairs_hook=_unique_keys, parse_constant=_no_constants, parse_float=json_float
    ),
    True: json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constants, parse_float=Decimal),
}


def _all_unicode(node: Value) -> bool:
    """False if a string anywhere in the document holds a lone surrogate (from a \\ud800 escape).

    A walk with its own stack: json reads documents nested deeper than a recursive walk may go."""
    pending = [node]
    while pending:
        node = pending.pop()
        t = type(node)
        if t is str:
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif t is dict:
            pending.extend(node.keys())
            pending.extend(node.values())
        elif t is list:
            pending.extend(node)
    return True


def parse_object(text: str, exact_decimals: bool = False) -> dict | None:
    """The JSON object `text` holds, exactly one and nothing after it; None for anything else."""
    try:
        doc = _DECODERS[exact_decimals].decode(text)  # decode() refuses anything after the value
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the interpreter's stack
        return None
    if type(doc) is not dict:
        return None
    if "\\u" in text and not _all_unicode(doc):  # only an escape can smuggle in a lone surrogate
        return None
    return doc


def _parse_exact(text: str) -> dict | None:
    return parse_object(text, exact_decimals=True)


def _getter(path: tuple[str | int, ...]):
    """The function that follows `path` into a document: the value, or None if any step is absent."""
    if len(path) == 1 and type(path[0]) is str:
        key = path[0]
        return lambda doc: doc.get(key)

    def get(doc: dict) -> object:
        node: Value = doc
        for step in path:
            if type(step) is int:
                if type(node) is not list or step >= len(node):
                    return _MISSING
            elif type(node) is not dict:
                return _MISSING
            node = node[step] if type(step) is int else node.get(step)
            if node is None:
                return _MISSING
        return node

    return get


def _rules(column: Column):
    """The column's checks of a well-typed value, in order: storable, enum, pattern, min, max."""
    rules = [column.type.unstorable]
    each = column.type.is_array
    if column.enum is not None:
        allowed, listed = column.enum, column.enum_text
        rules.append(_for_each(each, lambda v: None if v in allowed else f"not one of {listed}"))
    if column.pattern is not None:
        search, spelled = column.pattern.search, column.pattern.pattern
        rules.append(_for_each(each, lambda v: None if search(v) else f"does not match {spelled}"))
    if column.min is not None:
        low = column.min
        rules.append(_for_each(each, lambda v: None if v >= low else f"must be >= {low}, got {v}"))
    if column.max is not None:
        high = column.max
        rules.append(_for_each(each, lambda v: None if v <= high else f"must be <= {high}, got {v}"))
    return tuple(rules)


def _for_each(each: bool, rule):
    return for_each(rule) if each else rule


class RecordCheck:
    """A RecordSchema compiled into the per-record check; built once per Python task."""

    def __init__(
        self,
        schema: RecordSchema,
        max_value_bytes: int,
        registry: RegistryConfig | None = None,
        *,
        compiled: bool = True,
        give_up_after: int | None = 1_000,
    ) -> None:
        if max_value_bytes < 1:
            raise ValueError(f"max_value_bytes must be >= 1, got {max_value_bytes}")
        self.schema = schema
        self.max_value_bytes = max_value_bytes
        self.exact_decimals = schema.exact_decimals
        # A schema id column is no field of the record: the checks below see the others, and the id is
        # put in its place afterwards (_with_schema_ids).
        columns = tuple(c for c in schema.columns if c.meta is None)
        self._schema_ids = tuple(i for i, c in enumerate(schema.columns) if c.meta == "schema_id")
        self._getters = tuple(_getter(c.path) for c in columns)
        self._accepts = tuple(c.type.accept for c in columns)
        self._required = tuple(c.required for c in columns)
        self._rules = tuple(_rules(c) for c in columns)
        self._labels = tuple(c.name if c.path == (c.name,) else f"{c.name} ({c.source})" for c in columns)
        self._columns = columns
        self._width = len(columns)
        self._typed = _compile_typed(columns, self._getters, self._accepts, self._rules)
        self._parse = _parse_exact if self.exact_decimals else parse_object
        # The compiled fast path (eosflow.schema.compiled) of a JSON declaration; compiled=False
        # leaves every record to the Python check, which the fast path is tested against.
        self._fast = (
            compile_check(columns, self._getters, self._accepts, self._rules, self.exact_decimals)
            if compiled and schema.format == "json"
            else None
        )
        self._fallbacks = [0]  # records the fast path left to the Python check (a list: the closure counts)
        # A topic whose records the fast path mostly leaves to the Python check (fields beyond the declared
        # ones, a poisoned stretch) would pay for both: after this many records, a fast path that took
        # less than half of them is not tried again by this check. Verdicts are the same either way.
        self._give_up_after = give_up_after
        if schema.format == "json":
            self.check_value = self._checker()
        else:
            self.check_value = self._decoded_checker(_decoder(schema, registry))
        if self._schema_ids:
            self.check_value = _with_schema_ids(self.check_value, self._schema_ids)

    def __call__(self, value: bytes | None) -> tuple[str | None, list | None]:
        """(error, None) for the first failing check, or (None, the columns' typed values)."""
        return self.check_value(value)

    @property
    def compiled(self) -> bool:
        """Whether records go through the compiled fast path first."""
        return self._fast is not None

    @property
    def fallbacks(self) -> int:
        """How many records the fast path left to the Python check (rejected ones among them)."""
        return self._fallbacks[0]

    def _checker(self):
        """`__call__` as a closure over its parts: the per-record path without attribute lookups
        (BatchCheck calls it once per record)."""
        max_value_bytes, parse, typed_of, first_error, fast, fallbacks, give_up_after = (
            self.max_value_bytes,
            self._parse,
            self._typed,
            self.first_error,
            self._fast,
            self._fallbacks,
            self._give_up_after,
        )
        tried = 0

        def check_value(value: bytes | None) -> tuple[str | None, list | None]:
            nonlocal fast, tried
            if value is None:
                return "null value", None
            if len(value) > max_value_bytes:
                return f"oversized: {len(value)} bytes > {max_value_bytes}", None
            if value[:1] == FRAMED:  # Confluent's JSON Schema serializers: JSON never starts with a NUL
                if len(value) < HEADER_BYTES:
                    return NO_SCHEMA_ID, None
                value = value[HEADER_BYTES:]
            if fast is not None:
                # Only ever "valid, typed so": anything else is the Python check's to judge and name.
                tried += 1
                typed = fast(value)
                if typed is not None:
                    return None, typed
                fallbacks[0] += 1
                if give_up_after is not None and tried >= give_up_after and 2 * fallbacks[0] > tried:
                    fast = None
            try:
                text = value.decode("utf-8")  # strict: no surrogates, overlong forms or truncated sequences
            except UnicodeDecodeError:
                return "not UTF-8", None
            doc = parse(text)
            if doc is None:
                return "not JSON", None
            typed = typed_of(doc)
            if typed is not None:
                return None, typed
            return first_error(doc), None

        return check_value

    def _decoded_checker(self, decode: Callable[[bytes], tuple[str | None, dict | None]]):
        """`__call__` for a format whose decoder makes the document: Avro, Protobuf, text, bytes."""
        max_value_bytes, typed_of, first_error = self.max_value_bytes, self._typed, self.first_error

        def check_value(value: bytes | None) -> tuple[str | None, list | None]:
            if value is None:
                return "null value", None
            if len(value) > max_value_bytes:
                return f"oversized: {len(value)} bytes > {max_value_bytes}", None
            error, doc = decode(value)
            if error is not None:
                return error, None
            assert doc is not None  # decode names an error or returns the document
            typed = typed_of(doc)
            if typed is not None:
                return None, typed
            return first_error(doc), None

        return check_value

    def typed(self, doc: dict) -> list | None:
        """The typed columns if every rule passes, else None: the common case, without messages.

        Equivalent to first_error(doc) being None (tests/unit/schema/test_record_check.py holds them to
        it); the error is only worked out, rule by rule and in order, for a record that fails.
        """
        return self._typed(doc)

    def typed_by_rules(self, doc: dict) -> list | None:
        """`typed` as a loop over the columns' rules: what the compiled `typed` must equal."""
        out: list[object] = []
        for get, accept, required, rules in zip(
            self._getters, self._accepts, self._required, self._rules, strict=True
        ):
            raw = get(doc)
            if raw is None:
                if required:
                    return None
                out.append(None)
                continue
            value = accept(raw)
            if value is BAD:
                return None
            for rule in rules:
                if rule(value) is not None:
                    return None
            out.append(value)
        return out

    def first_error(self, doc: dict) -> str | None:
        """The first column rule `doc` fails: missing, then mistyped, then invalid; None if none."""
        raw = [get(doc) for get in self._getters]
        for i in range(self._width):
            if raw[i] is None and self._required[i]:
                return f"missing field: {self._labels[i]}"
        typed = [None if r is None else call(a, r) for a, r in zip(self._accepts, raw, strict=True)]
        for i in range(self._width):
            if typed[i] is BAD:
                return f"mistyped field: {self._labels[i]} (expected {self._columns[i].type.expected})"
        for i in range(self._width):
            if typed[i] is None:
                continue
            for rule in self._rules[i]:
                if (why := rule(typed[i])) is not None:
                    return f"invalid value: {self._labels[i]} ({why})"
        return None


# The common scalar tests written inline: a call per column and rule cost the declared check about
# 40% more than the hand-written orders check it replaced (tests hold the compiled and the
# rule-by-rule forms to the same answers).
_INLINE_ACCEPT = {
    "text": "type({v}) is str and '\\x00' not in {v}",
    "uuid": "type({v}) is str and _UUID({v}) is not None",
    "bigint": "type({v}) is int and -9223372036854775808 <= {v} <= 9223372036854775807",
    "integer": "type({v}) is int and -2147483648 <= {v} <= 2147483647",
    "boolean": "type({v}) is bool",
}


def _compile_typed(columns, getters, accepts, rules):
    """`RecordCheck.typed` for these columns as one generated function: each column's value is
    fetched, type-tested and constraint-tested in a single expression where its type allows it."""
    from eosflow.schema.types import _UUID

    # __name__: the function's module, so that pickling it (Spark ships it by value) does not search
    # every loaded module for a "typed".
    scope: dict[str, object] = {"BAD": BAD, "_UUID": _UUID.fullmatch, "__name__": __name__}
    lines = ["def typed(doc):", "    get = doc.get"]
    for i, column in enumerate(columns):
        v = f"v{i}"
        if column.path == (column.name,):
            lines.append(f"    {v} = get({column.name!r})")
        else:
            scope[f"get{i}"] = getters[i]
            lines.append(f"    {v} = get{i}(doc)")
        # Text that was another type (`text_from`) converts its old type's values: its accept, not a test.
        inline = None if column.type.text_from else _INLINE_ACCEPT.get(column.type.declared)
        if column.required and inline is not None and not column.type.is_array:
            # The type test refuses None itself: one test less on the common path.
            tests = [inline.format(v=v), *_constraints(column, v, i, scope)]
            lines.append(f"    if not ({' and '.join(tests)}):")
            lines.append("        return None")
            continue
        lines.append(f"    if {v} is None:")
        lines.append("        return None" if column.required else "        pass")
        lines.append("    else:")
        if column.type.is_array:
            # Arrays: the type's accept, then every rule as a call (element by element).
            scope[f"accept{i}"] = accepts[i]
            lines.append(f"        {v} = accept{i}({v})")
            tests = [f"{v} is not BAD"]
            for j, rule in enumerate(rules[i]):
                scope[f"rule{i}_{j}"] = rule
                tests.append(f"rule{i}_{j}({v}) is None")
        else:
            if inline is not None:
                tests = [inline.format(v=v)]  # the type's storability included
            else:
                scope[f"accept{i}"], scope[f"store{i}"] = accepts[i], column.type.unstorable
                lines.append(f"        {v} = accept{i}({v})")
                tests = [f"{v} is not BAD", f"store{i}({v}) is None"]
            tests += _constraints(column, v, i, scope)
        lines.append(f"        if not ({' and '.join(tests)}):")
        lines.append("            return None")
    lines.append(f"    return [{', '.join(f'v{i}' for i in range(len(columns)))}]")
    exec("\n".join(lines), scope)  # noqa: S102 - the source is built above from the declaration's types
    return scope["typed"]


def _constraints(column: Column, v: str, i: int, scope: dict[str, object]) -> list[str]:
    """A scalar column's enum, pattern, min and max as inline tests of the value named `v`."""
    tests = []
    if column.enum is not None:
        scope[f"enum{i}"] = column.enum
        tests.append(f"{v} in enum{i}")
    if column.pattern is not None:
        scope[f"pattern{i}"] = column.pattern.search
        tests.append(f"pattern{i}({v}) is not None")
    if column.min is not None:
        scope[f"min{i}"] = column.min
        tests.append(f"{v} >= min{i}")
    if column.max is not None:
        scope[f"max{i}"] = column.max
        tests.append(f"{v} <= max{i}")
    return tests


# Key types whose text form is the key's text itself; the others' is their JSON spelling (12, 1.5,
# true, {"a": 1}).
_TEXTUAL_KEYS = frozenset({"text", "uuid", "timestamptz", "date"})


def key_check(ctype: ColumnType, decode: Callable[[bytes], tuple] | None = None):
    """A typed key's check (`key: bigint`, `key: uuid`, ...): the key's bytes -> (None, the typed
    value) or (the reason, None). A record without a key has a NULL key, as under `key: text`.
    `decode`: a key in the Confluent wire format (`key_format`), its datum typed as a field's would be."""
    textual = ctype.declared in _TEXTUAL_KEYS
    decoder, accept, unstorable = _DECODERS[True], ctype.accept, ctype.unstorable
    mistyped = f"mistyped key (expected {ctype.expected})"

    def check(key: bytes | None) -> tuple[str | None, object]:
        if key is None:
            return None, None
        if decode is not None:
            error, decoded = decode(key)
            if error is not None:
                return f"mistyped key ({error})", None
            return typed(decoded)
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            return "mistyped key (not UTF-8)", None
        if textual:
            raw: object = text
        else:
            try:
                raw = decoder.decode(text.strip())
            except (ValueError, RecursionError):
                return mistyped, None
            if raw is None or ("\\u" in text and not _all_unicode(raw)):
                return mistyped, None
        return typed(raw)

    def typed(raw: object) -> tuple[str | None, object]:
        value = BAD if raw is None else accept(raw)
        if value is BAD:
            return mistyped, None
        if (why := unstorable(value)) is not None:
            return f"invalid key ({why})", None
        return None, value

    return check


def key_decoder(schema: RecordSchema, registry: RegistryConfig | None) -> Callable[[bytes], tuple] | None:
    """The decoder of a `key_format` key (any datum, not only records), or None for a plain key."""
    if schema.key_format is None:
        return None
    if registry is None:
        raise ValueError(
            f"a key_format {schema.key_format} needs a schema registry: set EOSFLOW_SCHEMA_REGISTRY_URL"
        )
    if schema.key_format == "avro":
        return AvroDecoder(registry, records_only=False)
    from eosflow.schema.protobuf import ProtobufDecoder

    return ProtobufDecoder(registry)
