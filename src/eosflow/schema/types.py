"""The column types a declaration may name: how a JSON value is accepted, stored and written.

Strict typing, no coercion: each type takes exactly the JSON values whose meaning it keeps (a JSON
integer is not a string "12", true is not 1, 1.5 is not an integer), and refuses what Postgres would
refuse to store (a NUL in text, an instant outside years 1-9999, a numeric with more digits than
declared), so that a value COPY cannot write becomes a rejected row, never a failed batch.

A type is parsed once from its declared spelling (`text`, `numeric(12,2)`, `timestamptz[]`) into a
`ColumnType`; `accept` and `unstorable` are plain functions so a check runs them per record cheaply.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa


class _Bad:
    """The marker for "not of the column's type", compared by identity.

    Spark ships a check to its workers with cloudpickle, which copies closures' globals by value: a
    plain object() would arrive as a second object that `is BAD` no longer matches. Pickled as a
    reference to this module's BAD, it stays one.
    """

    def __reduce__(self) -> str:
        return "BAD"

    def __repr__(self) -> str:
        return "BAD"


BAD = _Bad()  # a value does not have the column's type
# A decoded value (JSON, Avro, Protobuf): the checks dispatch on its Python type at run time (`type(v) is`),
# which mypy cannot follow through a variable, so Any rather than object.
Value = Any

_NUL = "\x00"
NUL_IN_TEXT = "holds a NUL character, which Postgres text cannot store"
NUL_IN_JSON = "holds a NUL character, which Postgres jsonb cannot store"
INSTANT_RANGE = "before 0001-01-01 or after 9999-12-31 in UTC"

# fullmatch, and [0-9] rather than \d: Python's \d also matches non-ASCII digits.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# An explicit zone is required: without one, the instant would depend on a time zone setting.
_INSTANT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-5][0-9])"
)
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_MAX_OFFSET = timedelta(hours=18)  # the zone offsets Java and Postgres accept
_INT64 = range(-(2**63), 2**63)
_INT32 = range(-(2**31), 2**31)
_NUMERIC = re.compile(r"numeric\(\s*([0-9]+)\s*,\s*([0-9]+)\s*\)")
MAX_NUMERIC_PRECISION = 38  # Arrow's decimal128, which carries the value to the COPY exactly


@dataclass(frozen=True)
class ColumnType:
    """One declared type: its spelling, Postgres and Arrow types, and how a JSON value becomes one."""

    declared: str  # as written in the declaration, normalized: "numeric(12,2)", "text[]"
    postgres: str  # the target column's type
    arrow: pa.DataType  # the type the checked batch carries to the COPY
    expected: str  # what a "mistyped field" error says was expected
    accept: Callable[[Value], object]  # the JSON value -> the typed value, or BAD
    unstorable: Callable[[Value], str | None]  # a typed value Postgres would refuse -> why
    element: ColumnType | None = None  # for arrays: the type of each element
    ordered: bool = False  # min/max apply
    exact_decimals: bool = False  # its values must be parsed as Decimal (numeric beyond 15 digits)
    text_from: str | None = None  # text that was this type (eosflow.schema.text_from): takes its values too

    @property
    def is_array(self) -> bool:
        return self.element is not None


def _storable(_: object) -> None:
    return None


def _text(v: object) -> object:
    return v if type(v) is str else BAD


def _no_nul(v: str) -> str | None:
    return NUL_IN_TEXT if _NUL in v else None


def _uuid(v: object) -> object:
    # Lower case only, so a business key (deduplicated downstream) has a single spelling.
    return v if type(v) is str and _UUID.fullmatch(v) else BAD


def _int64(v: object) -> object:
    # type() is int: bool is a subclass of int, and true is not a number.
    return v if type(v) is int and v in _INT64 else BAD


def _int32(v: object) -> object:
    return v if type(v) is int and v in _INT32 else BAD


def json_float(text: str) -> float | Decimal:
    """json's parse_float and msgspec's float_hook: the double a JSON number spells; the Decimal where
    no double holds it (past a double's range, 1e400, or a non-zero number below its smallest,
    1e-400), so that a double column rejects it by name rather than keep infinity or 0, and numeric
    and jsonb columns keep it exactly."""
    f = float(text)
    if f != 0.0 and f - f == 0.0:  # non-zero and finite (inf - inf is NaN): nearly every number
        return f
    if f == 0.0 and not Decimal(text):  # 0, 0.0, -0e5: a zero as written
        return f
    return Decimal(text)


def _double(v: Value) -> object:
    """A JSON number as a double; an integer only when the double holds it exactly. A number no
    double holds (past its range, or non-zero below its smallest) stays as it is, and
    `_double_unstorable` says why."""
    t = type(v)
    if t is float:
        return v
    if t is Decimal:
        if not v.is_finite():  # NaN, sNaN, Infinity: a transform's, never JSON's
            return v
        f = float(v)
        return f if f - f == 0.0 and (f != 0.0 or not v) else v
    if t is int:
        try:
            f = float(v)
        except OverflowError:
            return v
        return f if int(f) == v else BAD
    return BAD


DOUBLE_RANGE = "out of a double's range"


def _double_unstorable(v: Value) -> str | None:
    """Why a number the double column got is not a double: `_double` left it as it was sent."""
    if type(v) is float:
        return None
    if type(v) is Decimal and not v.is_finite():
        return f"{v} is not a number"
    if abs(v) < 1:  # and not 0: a zero is a double
        return f"{v} is {DOUBLE_RANGE}: not 0, but closer to 0 than any double, so it would be stored as 0"
    return f"{v} is {DOUBLE_RANGE}: it would be stored as infinity"


def _boolean(v: object) -> object:
    return v if type(v) is bool else BAD


def instant(v: object) -> object:
    """An ISO-8601 instant with its zone as an aware datetime; digits beyond microseconds truncated.

    The pattern decides what is accepted; fromisoformat (which would take more forms) only reads
    it, and refuses impossible dates and times (2026-02-30, 24:00, second 60, year 0).
    """
    if type(v) is not str or _INSTANT.fullmatch(v) is None:
        return BAD
    try:
        value = datetime.fromisoformat(v)
    except ValueError:
        return BAD
    offset = value.utcoffset()
    assert offset is not None  # the pattern takes an instant with its zone only
    if v[-1] != "Z" and abs(offset) > _MAX_OFFSET:
        return BAD
    return value


def storable_instant(v: datetime) -> str | None:
    # Year 1 with a positive zone offset is year 0 in UTC, which Postgres refuses; past 9999 no
    # Python client reads it back.
    try:
        v.astimezone(UTC)
    except OverflowError:
        return INSTANT_RANGE
    return None


def _date(v: object) -> object:
    if type(v) is not str or _DATE.fullmatch(v) is None:
        return BAD
    try:
        return date.fromisoformat(v)  # refuses 2026-02-30 and year 0
    except ValueError:
        return BAD


def _bytes(v: object) -> object:
    return v if type(v) is bytes else BAD  # from format: bytes, or an Avro/Protobuf bytes field


def _jsonb(v: object) -> object:
    return v  # any JSON value; JSON null is a missing value before it gets here


def _jsonb_unstorable(v: object) -> str | None:
    return _not_json(v)


def _not_json(node: Value) -> str | None:
    """Why a value cannot be written as jsonb: a NUL, or (from Avro) bytes, NaN or an infinity."""
    t = type(node)
    if t is str:
        return NUL_IN_JSON if _NUL in node else None
    if t is dict:
        for k, x in node.items():
            if (why := NUL_IN_JSON if _NUL in k else _not_json(x)) is not None:
                return why
        return None
    if t is list:
        return next((why for x in node if (why := _not_json(x)) is not None), None)
    if t is float and not math.isfinite(node):
        return f"holds {node}, which JSON cannot carry"
    if t is bytes:
        return "holds bytes, which JSON cannot carry"
    return None


def _numeric(precision: int, scale: int) -> tuple[Callable, Callable]:
    whole_digits = precision - scale

    def accept(v: Value) -> object:
        t = type(v)
        if t is Decimal:
            return v
        if t is int:
            return Decimal(v)
        if t is float:
            # repr is the shortest text that reads back as this double: for up to 15 significant
            # digits it is the number as written (precision above 15 parses JSON as Decimal). NaN
            # and the infinities (an Avro double may hold them) are no numeric(p,s).
            return Decimal(repr(v)) if math.isfinite(v) else BAD
        return BAD

    def unstorable(v: Decimal) -> str | None:
        sign, digits, exponent = v.normalize().as_tuple() if v else (0, (0,), 0)
        assert isinstance(exponent, int)  # finite: no decoder gives NaN or infinity (nor can Arrow hold them)
        decimals = max(0, -exponent)
        if decimals > scale:
            return f"more than {scale} decimal places, got {v}"
        if len(digits) + exponent > whole_digits:
            return f"more than {whole_digits} digits before the point, got {v}"
        return None

    return accept, unstorable


_SCALARS: dict[str, tuple[str, pa.DataType, str, Callable, Callable, bool]] = {
    # declared: (postgres, arrow, expected, accept, unstorable, ordered)
    "text": ("text", pa.string(), "string", _text, _no_nul, False),
    "uuid": ("uuid", pa.string(), "lower-case canonical UUID string", _uuid, _storable, False),
    "bigint": ("bigint", pa.int64(), "64-bit integer", _int64, _storable, True),
    "integer": ("integer", pa.int32(), "32-bit integer", _int32, _storable, True),
    "double": ("double precision", pa.float64(), "number", _double, _double_unstorable, True),
    "boolean": ("boolean", pa.bool_(), "true or false", _boolean, _storable, False),
    "timestamptz": (
        "timestamptz",
        pa.timestamp("us", tz="UTC"),
        "ISO-8601 timestamp string with zone, e.g. 2026-01-01T00:00:00Z",
        instant,
        storable_instant,
        False,
    ),
    "date": ("date", pa.date32(), "date string YYYY-MM-DD", _date, _storable, False),
    "jsonb": ("jsonb", pa.string(), "any JSON value", _jsonb, _jsonb_unstorable, False),
    "bytea": (
        "bytea",
        pa.binary(),
        "bytes (format: bytes, or an Avro or Protobuf bytes field)",
        _bytes,
        _storable,
        False,
    ),
}
TYPE_NAMES = (*_SCALARS, "numeric(p,s)", "<any of these but jsonb and bytea>[]")


class UnknownTypeError(ValueError):
    """A declared type eosflow does not know; the message lists the ones it does."""


def parse_type(declared: object) -> ColumnType:
    """The ColumnType a declaration spells, e.g. 'bigint', 'numeric(12,2)', 'text[]'."""
    text = re.sub(r"\s+", " ", str(declared).strip().lower())
    if text.endswith("[]"):
        element = parse_type(text[:-2])
        if element.is_array or element.declared in ("jsonb", "bytea"):
            raise UnknownTypeError(
                f"type {declared!r}: arrays hold scalars only (not jsonb, not bytea, not arrays)"
            )
        return ColumnType(
            declared=text,
            postgres=f"{element.postgres}[]",
            arrow=pa.string(),  # written as a Postgres array literal (eosflow.schema.values)
            expected=f"array of {element.expected}",
            accept=array_of(element.accept),
            unstorable=for_each(element.unstorable),
            element=element,
            exact_decimals=element.exact_decimals,
        )
    if m := _NUMERIC.fullmatch(text):
        precision, scale = int(m[1]), int(m[2])
        if not 1 <= precision <= MAX_NUMERIC_PRECISION or scale > precision:
            raise UnknownTypeError(
                f"type {declared!r}: numeric(p,s) needs 1 <= p <= {MAX_NUMERIC_PRECISION} and 0 <= s <= p"
            )
        accept, unstorable = _numeric(precision, scale)
        return ColumnType(
            declared=f"numeric({precision},{scale})",
            postgres=f"numeric({precision},{scale})",
            arrow=pa.decimal128(precision, scale),
            expected="number",
            accept=accept,
            unstorable=unstorable,
            ordered=True,
            exact_decimals=precision > 15,
        )
    if text in ("double precision", "float8"):
        text = "double"
    if text not in _SCALARS:
        raise UnknownTypeError(f"type {declared!r} unknown; known: {', '.join(TYPE_NAMES)}")
    postgres, arrow, expected, accept, unstorable, ordered = _SCALARS[text]
    return ColumnType(text, postgres, arrow, expected, accept, unstorable, ordered=ordered)


def array_of(accept: Callable[[object], object]) -> Callable[[object], object]:
    """An array's accept from its element's: a list whose elements are all accepted (NULL is not)."""

    def accept_array(v: object) -> object:
        if type(v) is not list:
            return BAD
        typed = [BAD if x is None else accept(x) for x in v]  # a NULL element is not the type either
        return BAD if BAD in typed else typed

    return accept_array


def for_each(rule: Callable[[Value], str | None]) -> Callable[[Value], str | None]:
    """An element's rule applied to an array: the first element's reason, or None."""

    def each(values: list) -> str | None:
        for v in values:
            if (why := rule(v)) is not None:
                return why
        return None

    return each
