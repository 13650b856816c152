"""The JSON record check's compiled fast path: msgspec parses and types a record in C.

A declaration becomes one `msgspec.Struct` (a field per top-level key its columns read), decoded by
`msgspec.json.Decoder(struct, strict=True)`, and a generated function that finishes in Python what C
cannot decide exactly. The fast path only ever answers "valid, and these are the typed values"; for
any other record it answers None and eosflow.schema.record runs its Python check, which gives the
verdict and the reason. The reasons are thus the Python check's by construction; what must hold is
that the fast path never accepts a record that check rejects, nor types a value otherwise
(tests/unit/schema/test_compiled_check.py holds the two to the same answers).

Per column type (a column alone on its top-level key; see `_scalar`):

- in C, final: text and uuid as ``str``, bigint and integer as ``int`` with their range and min/max
  as ``Meta(ge, le)`` (strict: 1.0 and true are no integers), boolean as ``bool``, an ``enum`` as a
  ``Literal`` of the allowed values that also pass the column's other rules; and their arrays. A
  ``pattern`` is matched with the rule's own RE2 program (eosflow.schema.patterns; ``Meta(pattern)``
  would run Python's backtracking ``re``), the canonical uuid form with its compiled pattern.
- in C as JSON strings, then the Python check's accept and rules: timestamptz and date (msgspec's
  own datetime and date parsing take forms the declared ones refuse, and round what they truncate),
  boolean with an enum; and their arrays.
- as any JSON value (``Any``, floats through ``float_hook``: the same ``json_float`` or ``Decimal``
  call as json's ``parse_float``), then the Python check's getter, accept and rules: double, numeric(p,s)
  (msgspec's ``Decimal`` also takes the string "1.5"), jsonb, their arrays, and every column of a
  top-level key that a nested path (``$.a.b``, ``$.a[0]``) or a second column reads.

What json refuses, msgspec refuses too, or the generated function does: malformed JSON, NaN and the
infinities, trailing data, a document that is not an object, lone surrogates (msgspec refuses a
``\\ud800`` escape without its pair), invalid UTF-8 (any non-ASCII value goes through Python's
strict codec first, as in the Python check), integers past Python's 4300 digits, nesting deeper
than `MAX_DEPTH`. A key no Struct field can be named after (one holding '"', '\\' or a control
character) leaves a record holding it to the Python check; its columns are otherwise NULL (a
required one, or a path starting with an index, ``$[0]``, leaves the whole declaration to the
Python check).

Members beyond the declared ones (producers add fields) are no Struct fields: the Struct's decoder
skips their values, building nothing, with the grammar its decoding uses (msgspec's ``json_skip``:
strings with every escape checked, surrogate pairs included, numbers, literals, objects and arrays
under the same recursion guard), so a skipped value ends where a decoded one would, and no declared
member is ever read from inside one. What the Struct does not see, the duplicate count's second
step below decodes and counts.

Duplicate keys: msgspec keeps the last value silently (its issue #648), so the fast path counts
what the document holds against what was decoded. Without a backslash a value holds no escape, so
every '"' delimits a string: ``value.count(b'"')`` is twice the document's strings (keys included).
With a backslash, every ':' outside a string separates a member, and every ':' of a decoded string
is a ':' or a ``\\u003a`` escape in the text: ``value.count(b":")`` plus the ``\\u003a`` escapes is
at least the members plus the colons of the strings (keys included), and equal to it unless an
escaped backslash precedes a ``u003a`` (such a record goes to the Python check, which is only
slower). On the decoded side, a value holds no more strings, members or colons than its text (its
own duplicates only lose some), and a member lost to a duplicate takes at least its key (one string,
one ':') with it: so the counts are equal exactly when every member was decoded and none was lost.
Two steps, both exact in this sense:

1. The Struct's present fields and strings, and a walk of its ``Any`` values. Each undeclared
   member is at least a key and a ':' the Struct did not decode, so equal counts mean the
   document's members are all declared ones and none was lost: the record is answered.
2. Otherwise (undeclared members, or a duplicate), the whole document decoded again as generic
   objects (``msgspec.json.Decoder()``, in C; keys unescaped, as the Struct matches them) and its
   colons counted: the text's (as above; without a backslash, exactly its members and the colons
   of its strings) against the decoded document's, which are those of its re-encoding
   (``msgspec.json.Encoder``, in C: it writes one ':' after each key and never escapes one in a
   string, so ``encode(doc).count(b":")`` is what `colons_in` walks, a test holds the two equal).
   Equal counts mean no member anywhere was lost, so each declared key is one member and the
   Struct's value is its value. A document with more than MAX_DEPTH '{' and '[' (in strings too)
   is walked by `colons_in` instead, which refuses nesting past MAX_DEPTH. Being a full decode, it
   also refuses what a skip checks only as grammar: an integer past Python's 4300 digits (json
   refuses it too), 1e400 (msgspec's own float parsing, no hook; json reads an infinity). A
   refusal, or a key no field is named after, leaves the record to the Python check.

A record whose counts differ goes to the Python check, which names a duplicate "not JSON".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from eosflow.schema.declaration import Column
from eosflow.schema.types import _UUID, BAD, json_float

# Containers nested deeper than this (the document itself is the first) leave a record to the Python
# check: json refuses a document nested past the interpreter's recursion limit (1000 frames, less
# those of its caller), and the fast path must not accept one it would refuse.
MAX_DEPTH = 64

_INT_RANGES = {"bigint": (-(2**63), 2**63 - 1), "integer": (-(2**31), 2**31 - 1)}
_HEAVY = frozenset({str, dict, list})  # the JSON values that hold strings


class _TooDeep(Exception):
    """A decoded value nests deeper than MAX_DEPTH."""


def strings_in(node: Any, depth: int) -> int:
    """The strings of a decoded JSON value, keys included (each is two '"' in its text)."""
    t = type(node)
    if t is str:
        return 1
    if t is dict:
        return len(node) + _strings_of(node.values(), depth)
    if t is list:
        return _strings_of(node, depth)
    return 0


def _strings_of(values: Iterable[Any], depth: int) -> int:
    """The strings in a container's values, one level below `depth` (a loop: this runs per record)."""
    if depth >= MAX_DEPTH:
        raise _TooDeep
    n = 0
    for v in values:
        t = type(v)
        if t is str:
            n += 1
        elif t is dict or t is list:
            n += strings_in(v, depth + 1)
    return n


def colons_in(node: Any, depth: int) -> int:
    """The members and the ':' characters in the strings (keys included) of a decoded JSON value."""
    t = type(node)
    if t is str:
        return node.count(":")
    if t is dict:
        return len(node) + sum(k.count(":") for k in node) + _colons_of(node.values(), depth)
    if t is list:
        return _colons_of(node, depth)
    return 0


def _colons_of(values: Iterable[Any], depth: int) -> int:
    """The ':' characters in a container's values, one level below `depth`."""
    if depth >= MAX_DEPTH:
        raise _TooDeep
    n = 0
    for v in values:
        t = type(v)
        if t is str:
            n += v.count(":")
        elif t is dict or t is list:
            n += colons_in(v, depth + 1)
    return n


def whole_count(decoder: StructDecoder, unnamed: tuple[str, ...]) -> Callable[[bytes], int]:
    """The second step, for a record whose members are not all Struct fields: the members of the
    document decoded whole (generic objects, in C) and the ':' characters in its strings, keys
    included; -1 if msgspec refuses it or it holds a key no Struct field is named after. _TooDeep
    past MAX_DEPTH. (It holds the StructDecoder, which pickles, rather than its decoders.)"""

    def whole(value: bytes) -> int:
        try:
            doc = decoder.decode_any(value)
        except Exception:  # any refusal, RecursionError included: the Python check decides
            return -1
        for key in unnamed:
            if key in doc:
                return -1
        if value.count(b"{") + value.count(b"[") > MAX_DEPTH:  # perhaps nested too deep: walked
            return colons_in(doc, 0)
        # msgspec writes a ':' after each key and never escapes one in a string: `colons_in`, in C.
        return decoder.encode(doc).count(b":")

    return whole


def all_match(match: Callable[[str], object], values: list[str]) -> bool:
    return all(match(v) is not None for v in values)


def list_colons(values: list[str]) -> int:
    return sum(v.count(":") for v in values)


def list_nul(values: list[str]) -> bool:
    return any("\x00" in v for v in values)


@dataclass(frozen=True)
class _Typed:
    """How msgspec types one column's field, and what Python still checks of it."""

    annotation: Any  # the msgspec type of a present, non-null value (built at run time)
    strings: bool  # the JSON value is a string (an array: of strings)
    finish: bool  # C checked the JSON type only: the column's accept and every rule run in Python
    match: Callable[[str], object] | None = None  # the pattern's search, or the uuid form's fullmatch
    nul: bool = False  # text: refuse a NUL (only a \u0000 escape writes one)
    colons: bool = False  # an accepted value may hold ':' (counted when the value has a backslash)


def _scalar(column: Column) -> _Typed | None:
    """The type of a column of a scalar type, or of its array's elements; None: decoded as Any."""
    if column.type.text_from is not None:
        return None  # text that takes its old type's values too, as their text: the accept decides
    declared = (column.type.element or column.type).declared
    if declared in ("text", "uuid"):
        if column.enum is not None:
            # The other rules are settled here, once, for each allowed value.
            if declared == "uuid":
                allowed = [v for v in column.enum if _UUID.fullmatch(v)]
            else:
                pattern = column.pattern
                allowed = [
                    v for v in column.enum if "\x00" not in v and (pattern is None or pattern.search(v))
                ]
            if not allowed:
                return None
            return _Typed(Literal[tuple(sorted(allowed))], True, False, colons=any(":" in v for v in allowed))
        if declared == "uuid":
            return _Typed(str, True, False, match=_UUID.fullmatch)
        match = column.pattern.search if column.pattern is not None else None
        return _Typed(str, True, False, match=match, nul=True, colons=True)
    if declared in _INT_RANGES:
        low, high = _INT_RANGES[declared]
        low = low if column.min is None else max(low, column.min)
        high = high if column.max is None else min(high, column.max)
        if column.enum is None:
            return _Typed(Annotated[int, Meta(ge=low, le=high)], False, False)
        allowed = [v for v in column.enum if low <= v <= high]
        return _Typed(Literal[tuple(sorted(allowed))], False, False) if allowed else None
    if declared == "boolean":
        return _Typed(bool, False, column.enum is not None)
    if declared in ("timestamptz", "date"):
        return _Typed(str, True, True, colons=True)
    return None  # double, numeric(p,s), jsonb


def _typed(column: Column) -> _Typed | None:
    scalar = _scalar(column)
    if scalar is None or not column.type.is_array:
        return scalar
    return _Typed(
        list[scalar.annotation],  # type: ignore[name-defined]  # a type built at run time, for msgspec
        scalar.strings,
        scalar.finish,
        scalar.match,
        scalar.nul,
        scalar.colons,
    )


@dataclass(frozen=True)
class _Field:
    """One top-level key of the document: a field of the Struct."""

    key: str
    columns: tuple[int, ...]  # the columns reading it, by index
    typed: _Typed | None  # None: decoded as Any
    required: bool  # msgspec refuses a record without it (a required typed column)
    named: bool = True  # False: a key no Struct field can be named, so a record holding it is refused


# What msgspec refuses in a field's name: such a key is no field, so a record that holds it falls back.
_UNNAMEABLE = frozenset('\\"').union(map(chr, range(0x20)))


def _plan(columns: tuple[Column, ...]) -> list[_Field] | None:
    """The Struct's fields, or None for a declaration the fast path does not take."""
    if any(type(c.path[0]) is not str for c in columns):
        return None  # `$[0]`: a document is an object, so never there; left to the Python check
    readers: dict[str, list[int]] = {}
    for i, column in enumerate(columns):
        first = column.path[0]
        assert type(first) is str  # refused above
        readers.setdefault(first, []).append(i)
    fields = []
    for key, indexes in readers.items():
        column = columns[indexes[0]]
        if not _UNNAMEABLE.isdisjoint(key):
            if any(columns[i].required for i in indexes):
                return None  # no record would be taken
            fields.append(_Field(key, tuple(indexes), None, False, named=False))  # its columns: NULL
            continue
        typed = _typed(column) if len(indexes) == 1 and len(column.path) == 1 else None
        fields.append(_Field(key, tuple(indexes), typed, typed is not None and column.required))
    return fields


class StructDecoder:
    """The declaration's Struct and its strict decoder. Pickled as its columns and rebuilt where it
    is loaded: msgspec's types and decoders do not pickle, and Spark ships a check by value."""

    __slots__ = ("columns", "exact_decimals", "decode", "decode_any", "encode")

    def __init__(self, columns: tuple[Column, ...], exact_decimals: bool) -> None:
        self.columns = columns
        self.exact_decimals = exact_decimals
        plan = _plan(columns)
        if plan is None:
            raise ValueError("the fast path does not take this declaration")
        fields: list[tuple] = []
        for j, field in enumerate(plan):
            if not field.named:
                continue
            if field.typed is None:
                fields.append((f"f{j}", Any, UNSET))
            elif field.required:
                fields.append((f"f{j}", field.typed.annotation))
            else:  # absent (UNSET) and null (None) are both NULL, but only one is a member
                fields.append((f"f{j}", field.typed.annotation | None | UnsetType, UNSET))
        struct = msgspec.defstruct(
            "Record",
            fields,
            rename={f"f{j}": field.key for j, field in enumerate(plan) if field.named},  # keys as f<j>
            kw_only=True,  # required and optional fields in any order
            # Undeclared members are skipped (json_skip: the same grammar, validated, not built); the
            # duplicate count then sends such a record to the whole decode below.
            forbid_unknown_fields=False,
            gc=False,  # short-lived, acyclic
        )
        # An untyped (Any) float is read by the very call json's parse_float makes, not by msgspec's own
        # parser: the same double, or the same Decimal, by construction.
        hook = Decimal if exact_decimals else json_float
        self.decode = msgspec.json.Decoder(struct, strict=True, float_hook=hook).decode
        # The whole document as generic objects, for the duplicate count only (no value of it is
        # typed): msgspec's own float parsing, which refuses what json would read as an infinity
        # (1e400), a refusal that only leaves the record to the Python check.
        self.decode_any = msgspec.json.Decoder().decode
        self.encode = msgspec.json.Encoder().encode

    def __reduce__(self) -> tuple[type, tuple[tuple[Column, ...], bool]]:
        return StructDecoder, (self.columns, self.exact_decimals)


def compile_check(
    columns: tuple[Column, ...],
    getters: tuple[Callable, ...],
    accepts: tuple[Callable, ...],
    rules: tuple[tuple[Callable, ...], ...],
    exact_decimals: bool,
) -> Callable[[bytes], list | None] | None:
    """The fast path of a JSON declaration: a record's bytes -> its typed columns if the record
    passes every check, None if it fails one or the fast path cannot tell (the Python check then
    decides); None for a declaration the fast path does not take. The getters, accepts and rules
    are the Python check's own (eosflow.schema.record), run wherever C does not decide."""
    plan = _plan(columns)
    if plan is None:
        return None
    decoder = StructDecoder(columns, exact_decimals)
    unnamed = tuple(f.key for f in plan if not f.named)
    scope: dict[str, Any] = {  # exec's namespace: what the generated source names, then what it defines
        "decoder": decoder,
        "whole": whole_count(decoder, unnamed),
        "UNSET": UNSET,
        "BAD": BAD,
        "_TooDeep": _TooDeep,
        "strings_in": strings_in,
        "colons_in": colons_in,
        "all_match": all_match,
        "list_colons": list_colons,
        "list_nul": list_nul,
        "NUL": "\x00",
        "__name__": __name__,  # as record._compile_typed: pickled by value without a module search
    }
    # The strings and the members of the required typed fields, which every accepted record has.
    strings = sum(
        # a required field is a typed one (_Field.required); mypy cannot know that
        1 + (f.typed.strings and not columns[f.columns[0]].type.is_array)  # type: ignore[union-attr, misc]
        for f in plan
        if f.required
    )
    members = sum(1 + f.key.count(":") for f in plan if f.required)
    body, escaped = [f"n = {strings}"], [f"w = {members}"]
    for j, field in enumerate(plan):
        body += _field_lines(j, field, columns, getters, accepts, rules, scope)
        escaped += _escaped_lines(j, field, columns)
    lines = [
        "def fast(value):",
        "    if not value.isascii():",
        "        try:",
        "            value.decode('utf-8')  # strict, as the Python check's",
        "        except UnicodeDecodeError:",
        "            return None",
        "    try:",
        "        s = decoder.decode(value)",
        "    except Exception:  # any refusal, RecursionError included: the Python check decides",
        "        return None",
        "    try:",
        *(f"        {line}" for line in body),
        "        if value.find(b'\\\\') >= 0:  # escapes: count colons",
        *(f"            {line}" for line in escaped),
        "            c = value.count(b':') + value.count(b'\\\\u003a') + value.count(b'\\\\u003A')",
        "            if c != w and c != whole(value):  # undeclared members, or a duplicate: step 2",
        "                return None",
        "        else:  # none: count strings",
        "            if value.count(b'\"') != 2 * n and value.count(b':') != whole(value):  # step 2",
        "                return None",
        "    except _TooDeep:",
        "        return None",
        f"    return [{', '.join(f'v{i}' for i in range(len(columns)))}]",
    ]
    exec("\n".join(lines), scope)  # noqa: S102 - the source is built above from the declaration's types
    return scope["fast"]


def _field_lines(
    j: int,
    field: _Field,
    columns: tuple[Column, ...],
    getters: tuple[Callable, ...],
    accepts: tuple[Callable, ...],
    rules: tuple[tuple[Callable, ...], ...],
    scope: dict[str, Any],
) -> list[str]:
    """Lines taking field f<j> of the Struct `s` into its columns' values v<i>, refusing (return
    None) what fails a check, and adding its strings to `n` where they are not counted statically."""
    typed = field.typed
    if not field.named:
        return [f"v{i} = None" for i in field.columns]
    if typed is None:  # Any: the Python check's getter, accept and rules, column by column
        lines = [f"a{j} = s.f{j}", f"if a{j} is not UNSET:", f"    n += 1 + strings_in(a{j}, 1)"]
        for i in field.columns:
            if len(columns[i].path) == 1:
                lines.append(f"r = None if a{j} is UNSET else a{j}")
            else:
                scope[f"get{i}"], scope[f"key{j}"] = getters[i], field.key
                lines.append(f"r = None if a{j} is UNSET else get{i}({{key{j}: a{j}}})")
            missing = "    return None" if columns[i].required else f"    v{i} = None"
            lines += ["if r is None:", missing, "else:"]
            lines += [f"    {line}" for line in _finish(i, "r", accepts, rules, scope)]
        return lines
    (i,) = field.columns
    array = columns[i].type.is_array
    checks = []
    if typed.strings and array:
        checks.append(f"n += len(v{i})")
    elif typed.strings and not field.required:
        checks.append("n += 1")
    if typed.match is not None:
        scope[f"match{i}"] = typed.match
        test = f"not all_match(match{i}, v{i})" if array else f"match{i}(v{i}) is None"
        checks += [f"if {test}:", "    return None"]
    if typed.finish:
        checks += _finish(i, f"v{i}", accepts, rules, scope)
    lines = [f"v{i} = s.f{j}"]
    if field.required:
        return lines + checks
    lines += [f"if v{i} is UNSET:", f"    v{i} = None", "else:", "    n += 1"]
    if checks:
        lines += [f"    if v{i} is not None:", *(f"        {line}" for line in checks)]
    return lines


def _escaped_lines(j: int, field: _Field, columns: tuple[Column, ...]) -> list[str]:
    """For a value holding a backslash: field f<j>'s NUL check, and its members and colons into `w`."""
    member = 1 + field.key.count(":")
    if not field.named:
        return []
    if field.typed is None:
        return [f"if s.f{j} is not UNSET:", f"    w += {member} + colons_in(s.f{j}, 1)"]
    array = columns[field.columns[0]].type.is_array
    checks = []
    if field.typed.nul:
        test = f"list_nul(s.f{j})" if array else f"NUL in s.f{j}"
        checks += [f"if {test}:", "    return None"]
    if field.typed.colons:
        checks.append(f"w += list_colons(s.f{j})" if array else f"w += s.f{j}.count(':')")
    if field.required:
        return checks
    lines = [f"if s.f{j} is not UNSET:", f"    w += {member}"]
    if checks:
        lines += [f"    if s.f{j} is not None:", *(f"        {line}" for line in checks)]
    return lines


def _finish(
    i: int, raw: str, accepts: tuple[Callable, ...], rules: tuple[tuple[Callable, ...], ...], scope: dict
) -> list[str]:
    """Column i's accept and rules applied to `raw`, into v<i>: the Python check's own functions."""
    scope[f"accept{i}"] = accepts[i]
    lines = [f"v{i} = accept{i}({raw})", f"if v{i} is BAD:", "    return None"]
    for k, rule in enumerate(rules[i]):
        scope[f"rule{i}_{k}"] = rule
        lines += [f"if rule{i}_{k}(v{i}) is not None:", "    return None"]
    return lines
