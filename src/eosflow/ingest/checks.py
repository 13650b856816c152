"""Step 3's rules: one Kafka record value -> its typed order fields, or the first check it fails.

Pure Python, no Spark: `check_value` is the rule book for one record; eosflow.ingest.transform's
`BatchCheck` applies it to the Arrow batches Spark hands a Python task. The checks run where the rows
already are, in the staging task, instead of as Spark expressions: the strict typing below cost
Spark about 7 s of two cores per 500k records, Python about 9 us per record (2.3 s of two cores).

Checks, in order; the first one that fails is the row's only error (1, 9 and 10 look at the
Kafka columns: eosflow.ingest.transform.BatchCheck checks them, vectorized; 2 to 8 are `check_value`):

1. ``invalid timestamp: <ms> ms since 1970-01-01 is before 0001-01-01|after 9999-12-31 in UTC
   (kafka_timestamp is NULL)``: Kafka's timestamp, outside the years event_time may take (and
   Arrow's CSV writer cannot even write a year past 32767). No row can keep it, the rejected one
   included, so this check comes first: its reason is where the timestamp survives. Kafka 4 takes
   any past timestamp by default, and any future one on a topic that allows it: a producer writing
   microseconds lands in year 57970. The milliseconds are the ones Spark hands over: its Kafka
   source shifts instants before 1582-10-15 (Julian to Gregorian), and fails the whole read on
   one beyond its microsecond range (past about year 294247)
2. ``null value``
3. ``oversized: <n> bytes > <max>``
4. ``not UTF-8``
5. ``not JSON`` (malformed, NaN/Infinity, duplicate keys, lone surrogates, trailing content, or
   not an object)
6. ``missing field: <name>`` (absent or JSON null)
7. ``mistyped field: <name> (expected <type>)``
8. ``invalid value: <name> (<why>)``, among them the values Postgres cannot store: a NUL character
   in text, an instant before 0001-01-01 or after 9999-12-31 in UTC (year 1 with a positive zone
   offset would be year 0, which Postgres refuses; past 9999 no Python client reads it back)
9. ``invalid key: holds a NUL character, which Postgres text cannot store (raw_key keeps the
   bytes)``: kafka_key is text
10. ``invalid header: <name> holds a NUL character, which Postgres jsonb cannot store``:
    kafka_headers is jsonb; a NUL in the name shows as ``?``

A key or header value that is not UTF-8 is not rejected: it lands with U+FFFD in place of each
invalid sequence (Python's "replace" for the key, Spark's make_valid_utf8 for header values),
deterministic but not faithful; only a rejected row keeps the key's bytes (raw_key).

Strict typing, no coercion: a JSON integer is not a string "12", 1.5, 1.0, 1e3, true, or an
integer beyond 64 bits; a string is not a number, an object or an array.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import call

# The producer defines the event contract; the checks here follow it rather than restate it.
from eosflow.produce.events import EVENT_TYPES, SCHEMA_VERSION

_BAD = object()  # a field's value does not have the field's type

# fullmatch, and [0-9] rather than \d: Python's \d also matches non-ASCII digits.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# An explicit zone is required: without one, the instant would depend on a time zone setting.
_INSTANT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-5][0-9])"
)
_MAX_OFFSET = timedelta(hours=18)  # the zone offsets Java and Postgres accept
_CURRENCY = re.compile(r"[A-Z]{3}")
_INT64 = range(-(2**63), 2**63)


def _uuid(v: object) -> object:
    # Lower case only, so the business key (deduplicated downstream) has a single spelling.
    return v if type(v) is str and _UUID.fullmatch(v) else _BAD


def _text(v: object) -> object:
    return v if type(v) is str else _BAD


def _int64(v: object) -> object:
    # type() is int: bool is a subclass of int, and true is not a number.
    return v if type(v) is int and v in _INT64 else _BAD


def _instant(v: object) -> object:
    """An ISO-8601 instant with its zone as an aware datetime; digits beyond microseconds truncated.

    The pattern decides what is accepted; fromisoformat (which would take more forms) only reads
    it, and refuses impossible dates and times (2026-02-30, 24:00, second 60, year 0).
    """
    if type(v) is not str or _INSTANT.fullmatch(v) is None:
        return _BAD
    try:
        instant = datetime.fromisoformat(v)
    except ValueError:
        return _BAD
    if v[-1] != "Z" and abs(instant.utcoffset()) > _MAX_OFFSET:
        return _BAD
    return instant


@dataclass(frozen=True)
class Field:
    name: str
    accept: Callable[[object], object]  # the typed value, or _BAD
    expected: str  # what the "mistyped field" error says was expected


# The required fields, in the order their errors are reported.
FIELDS: tuple[Field, ...] = (
    Field("event_id", _uuid, "lower-case canonical UUID string"),
    Field("event_type", _text, "string"),
    Field("event_time", _instant, "ISO-8601 timestamp string with zone, e.g. 2026-01-01T00:00:00Z"),
    Field("order_id", _text, "string"),
    Field("customer_id", _text, "string"),
    Field("amount_cents", _int64, "64-bit integer"),
    Field("currency", _text, "string"),
    Field("schema_version", _int64, "integer"),
)
_NAMES = tuple(f.name for f in FIELDS)
_ACCEPTS = tuple(f.accept for f in FIELDS)
_INDEX = {name: i for i, name in enumerate(_NAMES)}


_EVENT_TYPES = frozenset(EVENT_TYPES)


def _event_type(v: str) -> str | None:
    return None if v in _EVENT_TYPES else f"not one of {', '.join(EVENT_TYPES)}"


_NUL = "\x00"
NUL_IN_TEXT = "holds a NUL character, which Postgres text cannot store"


def _no_nul(v: str) -> str | None:
    return NUL_IN_TEXT if _NUL in v else None


def _storable_instant(v: datetime) -> str | None:
    try:
        v.astimezone(UTC)
    except OverflowError:
        return "before 0001-01-01 or after 9999-12-31 in UTC"
    return None


def _amount(v: int) -> str | None:
    return None if v > 0 else f"must be > 0, got {v}"


def _currency(v: str) -> str | None:
    return None if _CURRENCY.fullmatch(v) else "must be 3 upper-case letters"


def _schema_version(v: int) -> str | None:
    return None if v == SCHEMA_VERSION else f"must be {SCHEMA_VERSION}, got {v}"


# Why a well-typed value is still unacceptable, in field order.
_RULES: tuple[tuple[str, int, Callable[[object], str | None]], ...] = tuple(
    (name, _INDEX[name], rule)
    for name, rule in (
        ("event_type", _event_type),
        ("event_time", _storable_instant),
        ("order_id", _no_nul),
        ("customer_id", _no_nul),
        ("amount_cents", _amount),
        ("currency", _currency),
        ("schema_version", _schema_version),
    )
)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key")
    return obj


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


# One decoder for every record: json.loads with options would build a new one per call.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constants)


def _all_unicode(node: object) -> bool:
    """False if a string anywhere in the document holds a lone surrogate (from a \\ud800 escape)."""
    if type(node) is str:
        try:
            node.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if type(node) is dict:
        return all(_all_unicode(k) and _all_unicode(v) for k, v in node.items())
    if type(node) is list:
        return all(_all_unicode(v) for v in node)
    return True


def parse_object(text: str) -> dict | None:
    """The JSON object `text` holds, exactly one and nothing after it; None for anything else."""
    try:
        doc = _DECODER.decode(text)  # decode() refuses anything but whitespace after the value
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the interpreter's stack
        return None
    if type(doc) is not dict:
        return None
    if "\\u" in text and not _all_unicode(doc):  # only an escape can smuggle in a lone surrogate
        return None
    return doc


def check_value(value: bytes | None, max_value_bytes: int) -> tuple[str | None, list | None]:
    """(error, None) for the first failing check, or (None, the FIELDS' typed values) for a valid record."""
    if value is None:
        return "null value", None
    if len(value) > max_value_bytes:
        return f"oversized: {len(value)} bytes > {max_value_bytes}", None
    try:
        text = value.decode("utf-8")  # strict: no surrogates, overlong forms or truncated sequences
    except UnicodeDecodeError:
        return "not UTF-8", None
    doc = parse_object(text)
    if doc is None:
        return "not JSON", None
    typed = _valid_fields(doc)
    if typed is not None:
        return None, typed
    return first_field_error(doc), None


def _valid_fields(doc: dict) -> list | None:
    """The typed fields if every field rule passes, else None: the common case, in one expression.

    Equivalent to first_field_error(doc) being None (tests/unit/test_checks.py holds them to it);
    the error message is only worked out, rule by rule and in order, for a record that fails.
    """
    get = doc.get
    event_id, event_type, event_time = get("event_id"), get("event_type"), get("event_time")
    order_id, customer_id, amount = get("order_id"), get("customer_id"), get("amount_cents")
    currency, version = get("currency"), get("schema_version")
    if (
        type(event_id) is str
        and type(event_type) is str
        and type(order_id) is str
        and type(customer_id) is str
        and type(amount) is int
        and type(currency) is str
        and type(version) is int
        and 0 < amount < 2**63
        and version == SCHEMA_VERSION
        and event_type in _EVENT_TYPES
        and _CURRENCY.fullmatch(currency)
        and _UUID.fullmatch(event_id)
        and _NUL not in order_id
        and _NUL not in customer_id
    ):
        instant = _instant(event_time)
        if instant is not _BAD and _storable_instant(instant) is None:
            return [event_id, event_type, instant, order_id, customer_id, amount, currency, version]
    return None


def first_field_error(doc: dict) -> str | None:
    """The first field rule `doc` fails, as a message: missing, then mistyped, then invalid; None if none."""
    raw = list(map(doc.get, _NAMES))
    if None in raw:
        return f"missing field: {_NAMES[raw.index(None)]}"
    typed = list(map(call, _ACCEPTS, raw))
    if _BAD in typed:
        f = FIELDS[typed.index(_BAD)]
        return f"mistyped field: {f.name} (expected {f.expected})"
    for name, index, rule in _RULES:
        reason = rule(typed[index])
        if reason is not None:
            return f"invalid value: {name} ({reason})"
    return None
