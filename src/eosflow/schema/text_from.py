"""A text column that was another scalar type, by the declaration's explicit choice (`type: text`,
`text_from: <the old type>`; docs/DESIGN.md, "Declarations that evolve").

Postgres changes the column with `ALTER TABLE ... ALTER COLUMN ... TYPE text`, which writes each stored value
as the old type's text output. The records read after the change, a replay of the old ones included, must
give the same rows, so the column takes a string as text, and a value of the old type (an old record's
number, boolean or timestamp) as that type's text exactly as Postgres writes it: the ALTER runs with the
settings that output depends on (`ALTER_SETTINGS`), and the functions here are held to Postgres's own
output by tests/integration/test_text_from.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal, localcontext

import pyarrow as pa

from eosflow.schema import evolution
from eosflow.schema.types import BAD, ColumnType, UnknownTypeError, Value, parse_type

# The session settings Postgres's text output of these types depends on, for the ALTER's transaction.
ALTER_SETTINGS = {"TimeZone": "UTC", "DateStyle": "ISO, YMD", "extra_float_digits": "1"}


def _integer(v: int) -> str:
    return str(v)


def _double(v: float) -> str:
    """float8out with extra_float_digits = 1 (Postgres 12 on: Ryu's shortest): the fewest significant digits
    that read back as the double (the closest such number where several do), in fixed notation for a
    decimal exponent from -4 to 14, else as d.ddde+XX. Python's `repr` is not always that: it also takes a
    number exactly halfway to the next double, which reads back only by rounding the tie to even, where
    Postgres takes a digit more (-2.349070684836257e+16 against -2.3490706848362568e+16)."""
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    shortest = _shortest(v).normalize()
    sign, digits, exponent = shortest.as_tuple()
    assert isinstance(exponent, int)
    power = exponent + len(digits) - 1
    if -4 <= power < 15:
        return format(shortest, "f")
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"


def _shortest(v: float) -> Decimal:
    """The decimal of fewest significant digits strictly closer to `v` than to either neighbouring double;
    of several, the closest to `v`."""
    with localcontext() as exactly:
        exactly.prec = 1100  # a double's exact decimal has up to 767 significant digits: no rounding here
        exact = Decimal(v)
        ties = {(exact + Decimal(math.nextafter(v, side))) / 2 for side in (-math.inf, math.inf)}
        for k in range(1, 18):  # 17 digits always read back
            nearest = Decimal(f"{v:.{k - 1}e}")
            step = Decimal(1).scaleb(nearest.adjusted() - (k - 1))
            fits = [d for d in (nearest, nearest - step, nearest + step) if float(d) == v and d not in ties]
            if fits:
                return min(fits, key=lambda d: abs(d - exact))
    raise AssertionError(f"no 17-digit decimal reads back as {v!r}")  # IEEE 754 says there is one


def _boolean(v: bool) -> str:
    return "true" if v else "false"


def _timestamptz(v: datetime) -> str:
    """timestamptz_out in UTC with DateStyle ISO: 2026-11-28 04:00:00.12+00 (fraction's zeros dropped)."""
    u = v.astimezone(UTC)
    text = f"{u.year:04d}-{u.month:02d}-{u.day:02d} {u.hour:02d}:{u.minute:02d}:{u.second:02d}"
    if u.microsecond:
        text += f".{u.microsecond:06d}".rstrip("0")
    return text + "+00"


def _date(v: date) -> str:
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"


def _uuid(v: str) -> str:
    return v  # the accept takes the canonical lower-case form only, which is uuid_out's


def _numeric(scale: int) -> Callable[[Decimal], str]:
    exponent = Decimal(1).scaleb(-scale)

    def text(v: Decimal) -> str:
        return format(v.quantize(exponent), "f")  # numeric_out prints the column's scale

    return text


_TEXT: dict[str, Callable] = {
    "integer": _integer,
    "bigint": _integer,
    "double": _double,
    "boolean": _boolean,
    "timestamptz": _timestamptz,
    "date": _date,
    "uuid": _uuid,
}
TYPES = (*_TEXT, "numeric(p,s)")  # what text_from may name


def takes(declared: str) -> bool:
    """Whether a text column can be made from `declared` (a declared type's spelling) by `text_from`."""
    return declared in _TEXT or evolution.numeric(declared) is not None


def text_from(old_declared: str) -> ColumnType:
    """`type: text` that was `old_declared`: a string is itself; a value the old type accepts (and could
    store) is that type's text as Postgres writes it; anything else is no value of the column."""
    try:
        old = parse_type(old_declared)
    except UnknownTypeError as exc:
        raise UnknownTypeError(f"text_from {old_declared!r}: {exc}") from None
    if old.declared in _TEXT:
        to_text = _TEXT[old.declared]
    elif (numeric := evolution.numeric(old.declared)) is not None:
        to_text = _numeric(numeric[1])
    else:
        raise UnknownTypeError(
            f"text_from {old_declared!r}: a text column takes the values of a scalar type it was, one of "
            f"{', '.join(TYPES)} (not text, jsonb, bytea or an array)"
        )
    old_accept, old_unstorable = old.accept, old.unstorable

    def accept(v: Value) -> object:
        typed = old_accept(v)
        if typed is BAD or old_unstorable(typed) is not None:
            return v if type(v) is str else BAD
        return to_text(typed)

    text = parse_type("text")
    return ColumnType(
        declared="text",
        postgres="text",
        arrow=pa.string(),
        expected=f"string, or {old.expected} (kept as its text)",
        accept=accept,
        unstorable=text.unstorable,
        text_from=old.declared,
    )
