"""The compiled fast path of the JSON record check (eosflow.schema.compiled) against the Python check.

Differential: every record of the project's record corpora, and Hypothesis documents built from
several declarations (valid and invalid values, extra fields, duplicate keys, escapes and lone
surrogates, boundary numbers, nesting, random bytes), must get the same answer with the fast path as
with the Python check alone: the same error, or the same typed values of the same Python types.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from datetime import datetime
from decimal import Decimal

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eosflow.schema import compiled
from eosflow.schema.compiled import MAX_DEPTH
from eosflow.schema.declaration import Column, RecordSchema, parse_schema
from eosflow.schema.record import RecordCheck
from eosflow.schema.types import _DATE, _INSTANT
from eosflow_dev.produce import events
from tests import orders
from tests.integration import test_poison_values as poison_values
from tests.random import world
from tests.unit import test_checks, test_transform
from tests.unit.schema import test_record_check

UUID_A, UUID_B = "0b9a4f3e-5c6d-4e7f-8a9b-0c1d2e3f4a5b", "7d3c1e2f-0000-4000-8000-00000000abcd"

# Every type, required and optional, arrays, nested paths (through objects and arrays), a second
# column on one key, keys that need quoting, and every rule.
EVERY = parse_schema(
    {
        "columns": [
            {"name": "t", "type": "text", "required": True, "pattern": "^[a-z:]+$"},  # RE2: $ ends the value
            {"name": "t_opt", "type": "text"},
            {"name": "t_enum", "type": "text", "enum": ["a", "b:c", 'd"e', "f\\g", "h\x00"]},
            {"name": "t_enum_pattern", "type": "text", "enum": ["x1", "y2", "x3"], "pattern": "^x"},
            {"name": "u", "type": "uuid"},
            {"name": "u_enum", "type": "uuid", "required": True, "enum": [UUID_A, UUID_B]},
            {"name": "b", "type": "bigint", "required": True, "min": -5, "max": 10**12},
            {"name": "i", "type": "integer", "enum": [1, 2, 3], "max": 2},
            {"name": "i_min", "type": "integer", "min": 0},
            {"name": "d", "type": "double", "min": -1.5, "max": 1e300},
            {"name": "n", "type": "numeric(10,2)", "min": 0},
            {"name": "bo", "type": "boolean"},
            {"name": "bo_enum", "type": "boolean", "enum": [True]},
            {"name": "ts", "type": "timestamptz"},
            {"name": "dt", "type": "date", "required": True},
            {"name": "j", "type": "jsonb"},
            {"name": "ta", "type": "text[]", "pattern": "^x"},
            {"name": "ta_enum", "type": "text[]", "enum": ["p", "q:r"]},
            {"name": "ua", "type": "uuid[]"},
            {"name": "ba", "type": "bigint[]", "min": 0},
            {"name": "ia", "type": "integer[]", "enum": [1, 2]},
            {"name": "da", "type": "double[]"},
            {"name": "na", "type": "numeric(6,3)[]"},
            {"name": "boa", "type": "boolean[]"},
            {"name": "tsa", "type": "timestamptz[]"},
            {"name": "dta", "type": "date[]"},
            {"name": "cust_id", "type": "text", "source": "$.customer.id"},
            {"name": "cust", "type": "jsonb", "source": "$.customer"},
            {"name": "qty", "type": "bigint", "source": "$.items[1].qty", "max": 99},
            {"name": "colon_key", "type": "bigint", "required": True, "source": "$['a:b']"},
        ]
    },
    "every",
)
# numeric beyond 15 digits: every JSON float is read as a Decimal (exact_decimals).
EXACT = parse_schema(
    {
        "columns": [
            {"name": "amount", "type": "numeric(20,4)", "required": True, "max": 10**12},
            {"name": "score", "type": "double"},
            {"name": "doc", "type": "jsonb"},
            {"name": "parts", "type": "numeric(38,10)[]"},
            {"name": "n", "type": "bigint"},
            {"name": "label", "type": "text"},
        ]
    },
    "exact",
)
# A declaration the fast path types in C alone: no Python accept on the way.
PLAIN = parse_schema(
    {
        "columns": [
            {"name": "id", "type": "uuid", "required": True},
            {"name": "name", "type": "text", "required": True},
            {"name": "n", "type": "integer"},
            {"name": "flag", "type": "boolean", "required": True},
            {"name": "tags", "type": "text[]"},
        ]
    },
    "plain",
)
# Keys a Struct field cannot be named, and a second column on one key.
ODD = parse_schema(
    {
        "columns": [
            {"name": "odd", "type": "text", "source": "$['odd key:\"x\"']"},
            {"name": "id", "type": "uuid", "required": True},
            {"name": "id_again", "type": "uuid", "source": "$.id"},
        ]
    },
    "odd",
)
DECLARATIONS: dict[str, RecordSchema] = {
    "orders": orders.SCHEMA,
    "clicks": test_record_check.SCHEMA,
    "every": EVERY,
    "exact": EXACT,
    "plain": PLAIN,
    "odd": ODD,
}
SIZES = (512, 1_000_000)
CLICK = test_record_check.GOOD


def _pair(schema: RecordSchema, max_value_bytes: int) -> tuple[RecordCheck, RecordCheck]:
    # The fast path is never given up on here: the corpora are mostly records it leaves to Python.
    fast = RecordCheck(schema, max_value_bytes, give_up_after=None)
    return fast, RecordCheck(schema, max_value_bytes, compiled=False)


CHECKS = {(name, size): _pair(schema, size) for name, schema in DECLARATIONS.items() for size in SIZES}


def assert_same(name: str, value: bytes | None, size: int = 1_000_000) -> tuple[str | None, list | None]:
    """The fast path's answer is the Python check's: the same error, the same values, the same types."""
    fast, python = CHECKS[name, size]
    got, expected = fast(value), python(value)
    # repr tells apart what == does not: 1 and 1.0 and True, Decimal('1.0') and Decimal('1.00'), 0.0
    # and -0.0, a timezone's spelling.
    assert got == expected and repr(got) == repr(expected), (name, value)
    assert python.fallbacks == 0
    return got


def _parametrized(test: Callable) -> list:
    """The values a test of another module is parametrized with: its corpus, reused."""
    (mark,) = [m for m in test.pytestmark if m.name == "parametrize"]
    return list(mark.args[1])


def _orders_corpus() -> Iterable[bytes | None]:
    yield from (e.value for e in events.generate(seed=11, count=500))
    yield from (c.value for c in test_transform.ALL_CASES)
    yield test_checks.value()
    yield from _parametrized(test_checks.test_what_is_not_strict_json_is_rejected_as_such)
    for event_time in _parametrized(test_checks.test_instants_outside_the_contract_are_mistyped):
        yield test_checks.value(event_time=event_time)
    for event_time, _ in _parametrized(test_checks.test_instants_at_the_edges_are_read_exactly):
        yield test_checks.value(event_time=event_time)
    for changes, _ in _parametrized(test_checks.test_values_postgres_cannot_store_are_invalid):
        yield test_checks.value(**changes)
    rng = random.Random(5)  # test_checks' fuzz, over the whole check instead of its parts
    for _ in range(2_000):
        doc = {}
        for name, options in test_checks._CANDIDATES.items():
            choice = options[0] if rng.random() < 0.6 else rng.choice(options)
            if choice is not None or rng.random() < 0.5:
                doc[name] = choice
        yield json.dumps(doc).encode()
    good = poison_values.GOOD
    for _, changes, *_ in poison_values.POISON:
        yield json.dumps(good | changes).encode()
    for text in poison_values.EDGE_TEXTS:
        yield json.dumps(good | {"order_id": text, "customer_id": text[::-1]}).encode()
        yield json.dumps(good | {"order_id": text}, ensure_ascii=False).encode()
    for event_time in poison_values.EDGE_TIMES:
        yield json.dumps(good | {"event_time": event_time}).encode()
    for n, kind in enumerate(("valid", *world.POISON)):
        yield world.payload(kind, n)[0]


def _clicks_corpus() -> Iterable[bytes]:
    good = test_record_check.GOOD
    yield json.dumps(good).encode()
    for changes, _ in _parametrized(test_record_check.test_each_rule_rejects_with_its_reason):
        yield json.dumps({**good, **changes}).encode()
    yield json.dumps({k: good[k] for k in ("click_id", "url", "ts")} | {"kind": None, "items": []}).encode()
    yield json.dumps({**good, "customer": "c-1"}).encode()
    yield json.dumps({**good, "price": 12345678901234567890.5, "payload": {"k": [1e308, -0.0]}}).encode()


@pytest.mark.parametrize("size", SIZES)
def test_the_orders_corpora_get_the_same_answers(size):
    outcomes = set()
    for value in _orders_corpus():
        error, _ = assert_same("orders", value, size)
        outcomes.add(error.split(":")[0] if error else "valid")
    assert {"valid", "not JSON", "not UTF-8", "missing field", "mistyped field", "invalid value"} <= outcomes


def test_the_clicks_corpus_gets_the_same_answers():
    for value in _clicks_corpus():
        assert_same("clicks", value)


def test_a_valid_orders_record_takes_the_fast_path():
    check = RecordCheck(orders.SCHEMA, 65_536)
    assert check.compiled
    for e in events.generate(seed=3, count=200):
        assert check(e.value)[0] is None
    assert check.fallbacks == 0  # not one left to the Python check
    assert check(test_checks.value(amount_cents=0))[0].startswith("invalid value: amount_cents")
    assert check.fallbacks == 1  # a rejected record is: its reason is the Python check's


def _with_undeclared(value: bytes, members: bytes) -> bytes:
    """A record with `members` (JSON text) added after its last one."""
    assert value.endswith(b"}")
    return value[:-1] + b"," + members + b"}"


def test_a_topic_whose_records_carry_undeclared_fields_takes_the_fast_path():
    # Fields beyond the declared ones are skipped by the Struct and counted in a whole decode of the
    # document: such a record is answered by the fast path, and the give-up rule never triggers.
    check = RecordCheck(orders.SCHEMA, 65_536, give_up_after=100)
    python = RecordCheck(orders.SCHEMA, 65_536, compiled=False)
    undeclared = {"note": "not declared", "discount": 12.5, "meta": {"ip": "10.0.0.1", "tags": ["a", "b:c"]}}
    extra = [json.dumps(json.loads(e.value) | undeclared).encode() for e in events.generate(7, 300)]
    assert [check(v) for v in extra] == [python(v) for v in extra]
    assert all(check(v)[0] is None for v in extra)
    assert check.fallbacks == 0  # not one left to the Python check
    duplicated = [_with_undeclared(v, b'"meta":{"a":1,"a":2}') for v in extra[:10]]
    assert all(check(v) == python(v) == ("not JSON", None) for v in duplicated)
    assert check.fallbacks == 10


def test_a_topic_whose_records_the_fast_path_leaves_to_python_stops_trying_it():
    # A record the fast path leaves to the Python check (here a valid one: an undeclared 1e400 json reads as
    # an infinity, msgspec refuses) costs both paths; a check that keeps trying would pay for both on every
    # record of such a topic.
    check = RecordCheck(orders.SCHEMA, 65_536, give_up_after=100)
    python = RecordCheck(orders.SCHEMA, 65_536, compiled=False)
    left = [_with_undeclared(e.value, b'"reading":1e400') for e in events.generate(7, 300)]
    assert [check(v) for v in left] == [python(v) for v in left]
    assert all(check(v)[0] is None for v in left)
    assert check.fallbacks == 100  # tried on the first 100, then left alone: same verdicts, one path
    mixed = RecordCheck(orders.SCHEMA, 65_536, give_up_after=100)
    for i, e in enumerate(events.generate(8, 300)):
        mixed(left[i] if i % 3 == 0 else e.value)
    assert mixed.fallbacks == 100  # a third left to Python: the fast path keeps its two thirds


def _every_good() -> dict:
    return {
        "t": "ab:c",
        "u_enum": UUID_B,
        "b": 10**12,
        "dt": "2026-02-28",
        "a:b": -3,
        "t_opt": 'x "quoted" \\ back: slash é 😀 \u2028',
        "t_enum": "b:c",
        "t_enum_pattern": "x3",
        "u": UUID_A,
        "i": 2,
        "i_min": 2**31 - 1,
        "d": 1e300,
        "n": 12345678.25,
        "bo": False,
        "bo_enum": True,
        "ts": "0001-01-01T00:00:00.999999999-18:00",
        "j": {"k": [1, 2.5, None, "s:t", {"z": {}}], "e": []},
        "ta": ["x", "x:y"],
        "ta_enum": ["q:r", "p"],
        "ua": [UUID_A, UUID_B],
        "ba": [0, 2**63 - 1],
        "ia": [1, 2, 1],
        "da": [1, -0.0, 2.5e-300],
        "na": [1.5, 999.999, -1],
        "boa": [True, False],
        "tsa": ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.5+05:30"],
        "dta": ["2026-01-01"],
        "customer": {"id": "c:1", "more": [1]},
        "items": [{}, {"qty": 99}],
    }


@pytest.mark.parametrize(
    ("name", "doc"),
    [
        ("orders", json.loads(test_checks.value())),
        ("clicks", test_record_check.GOOD),
        ("every", _every_good()),
        ("every", {"t": "a", "u_enum": UUID_A, "b": 0, "dt": "2026-01-01", "a:b": 1}),
        ("exact", {"amount": 12345678901.1234, "score": 0.1, "doc": {"x": 0.10000000000000000001}}),
        ("plain", {"id": UUID_A, "name": "n", "flag": True, "tags": ["a", "b"]}),
    ],
)
def test_each_declaration_takes_the_fast_path_for_its_valid_records(name, doc):
    check, _ = CHECKS[name, 1_000_000]
    before = check.fallbacks
    for value in (json.dumps(doc).encode(), json.dumps(doc, ensure_ascii=False, indent=1).encode()):
        error, typed = assert_same(name, value)
        assert error is None and typed is not None
    assert check.fallbacks == before


def test_the_exact_declaration_reads_floats_as_decimals_on_the_fast_path():
    check, _ = CHECKS["exact", 1_000_000]
    _, typed = check(b'{"amount": 1.50, "score": 1.5, "doc": [2.50], "parts": [1, 0.1]}')
    assert [repr(v) for v in typed[:4]] == [
        "Decimal('1.50')",
        "1.5",
        "[Decimal('2.50')]",
        "[Decimal('1'), Decimal('0.1')]",
    ]
    assert check.fallbacks == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # Duplicate keys, at the top, nested in a jsonb value or an extra field, escaped, spaced.
        ("plain", b'{"id":"%s","name":"n","name":"m","flag":true}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true,"flag":true}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n:\\"","flag":true , "flag" : true}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n\\u003a","fl\\u0061g":true,"flag":true}' % UUID_A.encode()),
        ("exact", b'{"amount":1,"doc":{"a":1,"a":1}}'),
        ("exact", b'{"amount":1,"doc":[{"a":{"b":1,"b":2}}]}'),
        ("exact", b'{"amount":1,"doc":{"a:":1,"a:":1}}'),
        ("exact", b'{"amount":1,"doc":{"\\u0061":"\\u003a","a":":"}}'),
        ("exact", b'{"amount":1,"extra":{"a":1,"a":2}}'),
        # Lone surrogates, in values and keys, and a NUL by escape.
        ("plain", b'{"id":"%s","name":"\\ud800","flag":true}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"\\udc00\\ud800","flag":true}' % UUID_A.encode()),
        ("exact", b'{"amount":1,"doc":{"\\ud83d":1}}'),
        ("plain", b'{"id":"%s","name":"\\ud83d\\ude00","flag":true}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"a\\u0000","flag":true}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true,"tags":["\\u0000"]}' % UUID_A.encode()),
        ("exact", b'{"amount":1,"doc":{"k\\u0000":1}}'),
        # Numbers: NaN, infinities, integers as floats, booleans as integers, beyond int64.
        ("exact", b'{"amount":NaN}'),
        ("exact", b'{"amount":1,"score":Infinity}'),
        ("exact", b'{"amount":1,"score":1e400,"doc":1e400}'),
        ("clicks", json.dumps({**CLICK, "score": 1e400}).encode().replace(b"Infinity", b"1e400")),
        ("clicks", json.dumps({**CLICK, "payload": 7}).encode().replace(b": 7", b": 1e400")),
        ("plain", b'{"id":"%s","name":"n","flag":true,"n":1.0}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":1}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true,"n":true}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true,"n":2147483648}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true,"n":-2147483648}' % UUID_A.encode()),
        ("exact", b'{"amount":1,"n":9223372036854775808}'),
        ("exact", b'{"amount":1,"doc":' + b"9" * 4301 + b"}"),
        ("exact", b'{"amount":1,"doc":' + b"9" * 4300 + b"}"),
        ("every", json.dumps({**_every_good(), "d": 2**64 + 1}).encode()),
        ("every", json.dumps({**_every_good(), "t_enum": "h\x00"}).encode()),  # allowed, unstorable
        ("every", json.dumps({**_every_good(), "i": 3}).encode()),  # allowed, above max
        # Documents that are not one object, trailing data, nesting, nulls.
        ("plain", b"[]"),
        ("plain", b'{"id":"%s","name":"n","flag":true} {}' % UUID_A.encode()),
        ("plain", b' {"id":"%s","name":"n","flag":true}\r\n' % UUID_A.encode()),
        ("exact", b'{"amount":1,"doc":' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"),
        ("exact", b'{"amount":1,"doc":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"),
        ("exact", b'{"amount":1,"doc":' + b"[" * 5000 + b"]" * 5000 + b"}"),
        ("plain", b'{"id":"%s","name":null,"flag":true}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true,"n":null,"tags":null}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true,"tags":["a",null]}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true,"extra":1}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true,"f0":1}' % UUID_A.encode()),
        ("plain", b'{"id":"%s","name":"n","flag":true}' % UUID_A.upper().encode()),
        ("plain", b'{"id":"%s","name":"n\xc3","flag":true}' % UUID_A.encode()),
        # A key no Struct field can be named: its column is NULL without it, the Python check's with it.
        ("every", json.dumps(_every_good()).encode()),
        ("odd", json.dumps({"id": UUID_A}).encode()),
        ("odd", json.dumps({"id": UUID_A, 'odd key:"x"': "odd"}).encode()),
    ],
)
def test_the_traps_get_the_same_answers(name, value):
    assert_same(name, value)


# --- Undeclared members ----------------------------------------------------------------------------
#
# Members beyond the declared ones, as JSON text, put first, in the middle and last among a valid record's
# members. The expectation is the Python check's verdict, and FAST: valid, answered by the fast path itself.

FAST, VALID = "fast", "valid"
_DEEP = MAX_DEPTH - 1  # containers inside a top-level member that the fast path still walks


def _nested(depth: int, leaf: bytes, objects: bool) -> bytes:
    """`leaf` inside `depth` containers: objects (each {"a": ...}) or arrays."""
    if objects:
        return b'{"a":' * depth + leaf + b"}" * depth
    return b"[" * depth + leaf + b"]" * depth


_UNDECLARED: list[tuple[bytes, str | None]] = [
    # Flat, and the number forms json reads.
    (b'"note":"not declared"', FAST),
    (b'"discount":12.5,"count":-7,"big":123456789012345678901234567890', FAST),
    (b'"z":-0.0e-5,"e":1E+2,"yes":true,"no":false,"nil":null', FAST),
    (b'"":"","empty":{},"none":[]', FAST),
    (b'"f0":1,"f1":"named as a field of the Struct, not as a key"', FAST),
    (b'"huge":' + b"9" * 4300, FAST),
    (b'"huge":' + b"9" * 4301, "not JSON"),  # past Python's 4300 digits
    (b'"reading":1e400', VALID),  # json: an infinity; msgspec refuses, so the Python check answers
    # Nested objects and arrays, keys repeated in different objects, declared names one level down.
    (b'"meta":{"ip":"10.0.0.1","retries":2,"ab":{"bucket":"b","on":true}}', FAST),
    (b'"arr":[1,"two",[3,{"four":4}],{},[],[[]]]', FAST),
    (b'"o":{"a":{"b":{"c":[{"d":null,"e":["f"]}]}}}', FAST),
    (b'"o":{"a":1},"p":{"a":1},"q":[{"a":1},{"a":1}]', FAST),
    (b'"inner":{"id":"x","name":"y","amount":1,"event_id":"z","t":"a","click_id":"c"}', FAST),
    # Duplicates inside undeclared members, at every depth, of every kind of value.
    (b'"note":1,"note":2', "not JSON"),
    (b'"note":"same","note":"same"', "not JSON"),
    (b'"m":{},"m":{}', "not JSON"),
    (b'"m":[],"m":[]', "not JSON"),
    (b'"m":null,"m":null', "not JSON"),
    (b'"meta":{"a":1,"a":2}', "not JSON"),
    (b'"meta":{"x":{"a":"1","a":"1"}}', "not JSON"),
    (b'"meta":[[{"k":[{"a":1,"b":2,"a":3}]}]]', "not JSON"),
    (b'"meta":{"a:":1,"a:":1}', "not JSON"),
    (b'"meta":{"a":{},"b":[],"a":{}}', "not JSON"),
    (b'"deep":' + _nested(_DEEP - 1, b'{"a":1,"a":1}', True), "not JSON"),
    (b'"deep":' + _nested(_DEEP - 1, b'{"a":1,"a":1}', False), "not JSON"),
    # ... spelled with escapes: the same key once decoded.
    (b'"meta":{"\\u0061":1,"a":1}', "not JSON"),
    (b'"x\\u003ay":1,"x:y":2', "not JSON"),
    (b'"x\\u003Ay":"\\u003a","x:y":":"', "not JSON"),
    (b'"meta":{"q\\"":"\\"","q\\"":"\\""}', "not JSON"),
    (b'"n\\/":1,"n/":1', "not JSON"),
    # Escaped quotes, colons and backslashes inside undeclared strings and keys.
    (b'"q":"say \\"hi\\": a:b"', FAST),
    (b'"q":"\\u003a\\u003A:"', FAST),
    (b'"q":"\\\\u003a"', VALID),  # an escaped backslash before u003a: counted as an escape, left to Python
    (b'"q\\"k":"v","k:\\"":{"\\"":":"}', FAST),
    (b'"uni":"\\ud83d\\ude00 \\u00e9 \\n\\t\\/\\b\\f\\r\\\\ \\""', FAST),
    (b'"x":"\\u0000","x\\u0000":"\x7f"', FAST),  # a NUL is no concern of an undeclared member
    # Deep nesting inside an undeclared member: the fast path walks up to MAX_DEPTH, json further.
    (b'"deep":' + _nested(_DEEP, b"1", False), FAST),
    (b'"deep":' + _nested(_DEEP, b'"s"', True), FAST),
    (b'"deep":' + _nested(MAX_DEPTH, b"1", False), VALID),
    (b'"deep":' + _nested(MAX_DEPTH, b"1", True), VALID),
    (b'"deep":' + _nested(5_000, b"1", False), None),  # past the interpreter's recursion limit
    (b'"deep":' + _nested(100_000, b"", True), None),
    # Non-ASCII, and invalid UTF-8 (a cut sequence, an encoded surrogate, an overlong form, a stray byte).
    ('"name_é":"ünïcödé 😀 \u2028"'.encode(), FAST),
    (b'"bad":"\xc3"', "not UTF-8"),
    (b'"bad":"\xed\xa0\x80"', "not UTF-8"),
    (b'"bad":"\xf0\x9f\x98"', "not UTF-8"),
    (b'"bad":"\xc0\xaf"', "not UTF-8"),
    (b'"b\xffad":1', "not UTF-8"),
    # Lone surrogates, in values and keys.
    (b'"x":"\\ud800"', "not JSON"),
    (b'"x":"\\udc00\\ud800"', "not JSON"),
    (b'"x\\ud800":1', "not JSON"),
    (b'"x":["\\ud800\\u0041"]', "not JSON"),
    (b'"x":{"k":"\\uDBFF"}', "not JSON"),
    # Malformed.
    *((b'"x":' + bad, "not JSON") for bad in (b"NaN", b"Infinity", b"-Infinity", b"[1,]", b'{"a":1,}')),
    *((b'"x":' + bad, "not JSON") for bad in (b"01", b'"\\q"', b'"\x01"', b"tru", b"1.", b".5", b"+1")),
    *((b'"x":' + bad, "not JSON") for bad in (b"[1 2]", b'{"a" 1}', b"{1:2}", b'"\\u12"', b"[", b"}")),
]
_BASES = {
    "orders": json.loads(test_checks.value()),
    "clicks": CLICK,
    "every": _every_good(),
    "exact": {"amount": 12.5, "score": 0.5, "doc": {"k": [1, "v"]}, "label": "l:1"},
    "plain": {"id": UUID_A, "name": "n", "flag": True, "tags": ["a", "b"]},
    "odd": {"id": UUID_A},
}


def _undeclared_corpus(name: str) -> Iterable[tuple[bytes, str | None]]:
    """A valid record of the declaration with each of _UNDECLARED first, in the middle and last; and
    with a declared member repeated, as written and escaped."""
    base = _BASES[name]
    members = [json.dumps(k).encode() + b":" + json.dumps(v).encode() for k, v in base.items()]
    key, value = next(iter(base.items()))
    twins = [
        json.dumps(key).encode() + b":" + json.dumps(value).encode(),
        b'"\\u%04x' % ord(key[0]) + json.dumps(key)[2:].encode() + b":" + json.dumps(value).encode(),
    ]
    # The key ODD's Struct cannot name a field after: the Python check reads it.
    odd = (b'"odd key:\\"x\\"":"odd"', VALID if name == "odd" else FAST)
    extras = [*_UNDECLARED, odd, *((twin, "not JSON") for twin in twins)]
    for extra, expected in extras:
        for at, glue in ((0, b","), (len(members) // 2, b", "), (len(members), b",\n ")):
            yield b"{" + glue.join([*members[:at], extra, *members[at:]]) + b"}", expected
    yield b"{" + b",".join([*members, b'"note":1']) + b"} {}", "not JSON"  # trailing data
    # json and msgspec each refuse nesting past the interpreter's recursion limit, less the frames of
    # their callers: around it, a few levels json refuses and msgspec does not, wherever the check runs.
    for depth in range(850, 1_000):
        yield b"{" + b",".join([*members, b'"deep":' + _nested(depth, b"1", False)]) + b"}", None
    yield b"{" + b",".join([*members, b'"note":1']) + b"}\r\n\t ", FAST


@pytest.mark.parametrize("name", list(_BASES))
def test_records_with_undeclared_members_get_the_same_answers(name):
    fast, _ = CHECKS[name, 1_000_000]
    for value, expected in _undeclared_corpus(name):
        before = fast.fallbacks
        error, _ = assert_same(name, value)
        if expected == FAST:
            assert error is None and fast.fallbacks == before, (name, value)
        elif expected is not None:
            assert (error or VALID) == expected, (name, value)


def _disagreements(check: RecordCheck, name: str) -> list[bytes]:
    """The records of the undeclared corpus on which `check` and the Python check differ."""
    _, python = CHECKS[name, 1_000_000]
    return [v for v, _ in _undeclared_corpus(name) if repr(check(v)) != repr(python(v))]


def _trusting(decoder, unnamed):
    # Broken: msgspec decoded the document, so its count is taken as right (duplicates are last-wins).
    def whole(value: bytes) -> int:
        try:
            decoder.decode_any(value)
        except Exception:
            return -1
        escapes = value.count(b"\\u003a") + value.count(b"\\u003A") if b"\\" in value else 0
        return value.count(b":") + escapes

    return whole


_WHOLE_COUNT = compiled.whole_count


def _forgetful(decoder, unnamed):
    # Broken: a key no Struct field is named after is not looked for; its column stays NULL.
    return _WHOLE_COUNT(decoder, ())


def _unwalked(decoder, unnamed):
    # Broken: the document's depth is left to msgspec's own recursion guard, a few levels above json's.
    def whole(value: bytes) -> int:
        try:
            doc = decoder.decode_any(value)
        except Exception:
            return -1
        return -1 if any(key in doc for key in unnamed) else decoder.encode(doc).count(b":")

    return whole


@pytest.mark.parametrize(
    ("name", "whole_count"),
    [
        ("plain", _trusting),  # without escapes: the quote count
        ("every", _trusting),  # with escapes: the colon count
        ("orders", _trusting),
        ("odd", _forgetful),
        ("plain", _unwalked),
    ],
)
def test_a_broken_fast_path_for_undeclared_members_is_caught(monkeypatch, name, whole_count):
    # The differential corpus is only worth its records if it tells a wrong second step from the right one.
    monkeypatch.setattr(compiled, "whole_count", whole_count)
    broken = RecordCheck(DECLARATIONS[name], 1_000_000, give_up_after=None)
    assert broken.compiled
    wrong = _disagreements(broken, name)
    assert wrong, name
    # What it gets wrong is what it was broken in: a record it accepts that the Python check refuses or
    # types otherwise.
    _, python = CHECKS[name, 1_000_000]
    assert all(broken(v)[0] is None for v in wrong)


@pytest.mark.parametrize(
    "column",
    [
        {"name": "first", "type": "text", "source": "$[0]"},  # a document is an object: never there
        {"name": "odd", "type": "text", "required": True, "source": "$['a\"b']"},  # no field can be named so
    ],
)
def test_a_declaration_the_fast_path_cannot_take_is_left_to_the_python_check(column):
    schema = parse_schema({"columns": [{"name": "id", "type": "uuid", "required": True}, column]}, "t")
    assert not RecordCheck(schema, 4096).compiled


def test_a_check_shipped_to_a_spark_worker_keeps_its_fast_path():
    from pyspark import cloudpickle

    shipped = cloudpickle.loads(cloudpickle.dumps(RecordCheck(orders.SCHEMA, 4096)))
    assert shipped.compiled
    assert shipped(test_checks.value())[0] is None and shipped.fallbacks == 0
    assert shipped(_with_undeclared(test_checks.value(), b'"note":{"a":[1]}'))[0] is None
    assert shipped.fallbacks == 0  # the second step (the whole decode) shipped too
    assert shipped(test_checks.value(currency="eur"))[0].startswith("invalid value: currency")


# --- Hypothesis: documents built from a declaration's columns ---------------------------------------
#
# A document is built as a tree: most columns get a valid value at their path, a few ("wild") get an
# edge value, a wrong type, null or nothing; most documents get undeclared members too (any JSON value,
# now and then one nested about MAX_DEPTH deep). It is then written out with
# the liberties JSON allows (whitespace, escapes, number spellings) and, in some documents, ones it
# does not (duplicate keys, lone surrogates, a byte changed); some values are random bytes.


class Num(str):
    """A JSON number as written."""


class Obj(list):
    """A JSON object as its members, in order."""


_INT_EDGES = [0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1]
_NUMBER_SPELLINGS = [
    *("1.0", "1e2", "1E+02", "-0", "-0.0", "0.10000000000000000001", "1e400", "-1e400", "1e-400"),
    *("12345678901234567890.0123456789", "99999999.995", "1.000", "2.5e-300", "18446744073709551617"),
]
_TEXTS = st.one_of(
    st.text(max_size=10),
    st.text(alphabet=':"\\/\x00\x1f\x7f é😀\u2028\ud7ff\ue000abc', max_size=8),
    st.sampled_from(["", "a", "b:c", 'd"e', "f\\g", "h\x00", "x1", "x3", "p", "q:r", "ab:c", "\x00"]),
)
_INSTANT_EDGES = [
    *poison_values.EDGE_TIMES,
    *_parametrized(test_checks.test_instants_outside_the_contract_are_mistyped),
    *("0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00", "2026-01-01t00:00:00z"),
    *("2026-01-01 00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T00:00:00.1234567Z", "2026-01-01T00:00Z"),
]


def _number(value: object) -> Num:
    return Num(repr(value) if isinstance(value, float) else str(value))


_NUMBERS = st.one_of(
    st.integers().map(_number),
    st.sampled_from([*_INT_EDGES, 2**64 + 1]).map(_number),
    st.floats(allow_nan=False, allow_infinity=False).map(_number),
    st.decimals(allow_nan=False, allow_infinity=False).map(_number),
    st.sampled_from(_NUMBER_SPELLINGS).map(Num),
)
_SCALARS = st.one_of(_NUMBERS, _TEXTS, st.sampled_from([True, False, None, UUID_A]))
_ANY = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.lists(st.tuples(_TEXTS, inner), max_size=3).map(Obj),
    max_leaves=8,
)


def _instant(moment: datetime, offset: int, timespec: str, zulu: bool) -> str:
    zone = "Z" if zulu else f"{'+' if offset >= 0 else '-'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    return moment.isoformat(timespec=timespec) + zone


_VALID_INSTANTS = st.builds(
    _instant,
    st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)),
    st.integers(-18 * 60, 18 * 60),
    st.sampled_from(["seconds", "milliseconds", "microseconds"]),
    st.booleans(),
)


def _valid_scalar(column: Column) -> st.SearchStrategy:
    """Values the column (an array: each of its elements) accepts."""
    ctype = column.type.element or column.type
    declared = ctype.declared
    if column.enum is not None:
        allowed = [v for v in column.enum if type(v) is not str or "\x00" not in v]
        if column.pattern is not None:
            allowed = [v for v in allowed if column.pattern.search(v)]
        low, high = column.min, column.max
        allowed = [v for v in allowed if (low is None or v >= low) and (high is None or v <= high)]
        scalar = st.sampled_from(sorted(allowed, key=repr))
    elif declared == "text":
        pattern = column.pattern
        # Python's $ also matches before a final newline, so from_regex may write one RE2 refuses.
        scalar = st.from_regex(pattern.pattern).filter(pattern.search) if pattern is not None else _TEXTS
        scalar = scalar.filter(lambda v: "\x00" not in v)
    elif declared == "uuid":
        scalar = st.uuids().map(str)
    elif declared in ("bigint", "integer"):
        bits = 63 if declared == "bigint" else 31
        low = -(2**bits) if column.min is None else column.min
        scalar = st.integers(low, 2**bits - 1 if column.max is None else column.max).map(_number)
    elif declared == "double":
        scalar = st.floats(
            min_value=column.min, max_value=column.max, allow_nan=False, allow_infinity=False
        ).map(_number)
    elif declared.startswith("numeric"):
        precision, scale = (int(x) for x in declared[8:-1].split(","))
        top = 10 ** (precision - scale) - 1
        scalar = st.decimals(
            min_value=column.min if column.min is not None else -top,
            max_value=min(top, column.max) if column.max is not None else top,
            places=scale,
        ).map(_number)
    elif declared == "boolean":
        scalar = st.booleans()
    elif declared == "timestamptz":
        scalar = _VALID_INSTANTS
    elif declared == "date":
        scalar = st.dates().map(lambda d: d.isoformat())
    else:
        scalar = _ANY.filter(lambda v: v is not None)
    return scalar


def _valid(column: Column) -> st.SearchStrategy:
    scalar = _valid_scalar(column)
    return st.lists(scalar, max_size=3) if column.type.is_array else scalar


def _wild(column: Column) -> st.SearchStrategy:
    """Edge values of the column's type, other JSON values, and null."""
    declared = (column.type.element or column.type).declared
    edges = {
        "text": st.one_of(st.sampled_from(["\x00", "a\x00", ":", '"', "\\", "é"]), _TEXTS),
        "uuid": st.sampled_from([UUID_A.upper(), UUID_A + "\n", "{" + UUID_A + "}", UUID_A.replace("-", "")]),
        "bigint": st.sampled_from([*_INT_EDGES, -6, -5, 10**12, 10**12 + 1]).map(_number),
        "integer": st.sampled_from([*_INT_EDGES, 2, 3]).map(_number),
        "timestamptz": st.one_of(st.sampled_from(_INSTANT_EDGES), st.from_regex(_INSTANT, fullmatch=True)),
        "date": st.one_of(
            st.sampled_from(["0000-01-01", "2026-02-30", "2026-1-01"]), st.from_regex(_DATE, fullmatch=True)
        ),
    }.get(declared, _NUMBERS)
    # The declared rules' own edges: each enum value (a NUL one among them), and either side of a bound.
    near = sorted(column.enum, key=repr) if column.enum is not None else []
    for bound in (column.min, column.max):
        if bound is not None:
            near += [bound - 1, bound, bound + 1] if type(bound) is int else [bound]
    if near:
        near = [_number(v) if type(v) in (int, float, Decimal) else v for v in near]
        edges = st.one_of(st.sampled_from(near), edges)
    if column.type.is_array:
        element = st.one_of(edges, _valid_scalar(column), _SCALARS)
        return st.one_of(st.lists(element, max_size=3), st.lists(element, max_size=3), _ANY)
    return st.one_of(edges, edges, edges, _SCALARS, _ANY)


def _one_in(draw: st.DrawFn, n: int) -> bool:
    # Not `== 0`: Hypothesis draws the smallest integer far more often than the others.
    return draw(st.integers(0, n - 1)) == n // 2


def _put(root: dict, path: tuple, value: object, filler: list) -> None:
    """`value` at `path` in the document, making the objects and arrays on the way."""
    node: object = root
    for step, following in zip(path, [*path[1:], None], strict=True):
        if following is None:
            child = value
        else:
            child = node[step] if isinstance(node, dict) and step in node else None
            if type(following) is int and not isinstance(child, list):
                child = list(filler[: following + 1])
            elif type(following) is str and not isinstance(child, dict):
                child = {}
        if isinstance(node, dict):
            node[step] = child
        elif isinstance(node, list) and type(step) is int:
            node.extend([None] * (step + 1 - len(node)))
            node[step] = child
        node = child


@st.composite
def _tree(draw: st.DrawFn, schema: RecordSchema) -> Obj:
    columns = schema.columns
    # Mostly one wild column, so that what it alone does to the answer shows.
    how_many = min(len(columns), draw(st.sampled_from([0, 1, 1, 1, 2, 3, 8])))
    wild = draw(st.sets(st.integers(0, len(columns) - 1), min_size=how_many, max_size=how_many))
    filler = draw(st.lists(_SCALARS, min_size=3, max_size=3))
    root: dict = {}
    for i, column in enumerate(columns):
        if i in wild:
            roll = draw(st.integers(0, 7))
            if roll == 3:
                continue  # absent
            value = None if roll == 4 else draw(_wild(column))
        elif not column.required and _one_in(draw, 6):
            value = draw(st.sampled_from([None, "absent"]))
            if value == "absent":
                continue
        else:
            value = draw(_valid(column))
        _put(root, column.path, value, filler)
    if not _one_in(draw, 3):
        for key in draw(st.lists(_UNDECLARED_KEYS, min_size=1, max_size=3)):
            root.setdefault(key, draw(st.one_of(_ANY, _ANY, _ANY, _DEEP_VALUES)))
    return _members(root)


_UNDECLARED_KEYS = st.one_of(_TEXTS, st.sampled_from(["note", "meta", "f0", "x:y", 'q"k', "a\\b", "é", ""]))


def _deep(depth: int, leaf: object, objects: bool) -> object:
    for _ in range(depth):
        leaf = Obj([("a", leaf)]) if objects else [leaf]
    return leaf


# A member's value nested inside `depth` containers: with the document, depth + 1.
_DEEP_VALUES = st.builds(_deep, st.integers(MAX_DEPTH - 2, MAX_DEPTH + 1), _SCALARS, st.booleans())


def _members(node: object) -> object:
    if isinstance(node, dict):
        return Obj((k, _members(v)) for k, v in node.items())
    if isinstance(node, list):
        return [_members(v) for v in node]
    return node


_SPACES = ["", "", "", " ", "\n", "\t ", "\r\n"]
_LONE = ["\\ud800", "\\udfff", "\\ud83d\\ude00", "\\uDBFF", "\\ud800\\u0041"]


def _escape(ch: str, upper: bool) -> str:
    """\\uXXXX for a character, a surrogate pair beyond the BMP."""
    code = ord(ch)
    units = [code] if code <= 0xFFFF else [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + (code & 0x3FF)]
    return "".join(f"\\u{u:04X}" if upper else f"\\u{u:04x}" for u in units)


def _string(text: str, rng: random.Random, surrogates: bool, raw: bool) -> str:
    """A JSON string as some producer might escape it; with `surrogates`, perhaps a lone one. `raw`:
    without a backslash (what would need one is replaced), as most records are written."""
    if raw:
        return '"' + "".join("_" if ch in '"\\' or ord(ch) < 0x20 else ch for ch in text) + '"'
    style = rng.randrange(4)  # as written, non-ASCII escaped (json.dumps), all escaped, mixed
    out = ['"']
    for ch in text:
        how = rng.randrange(6) if style == 3 else (5, 0, 1, 1)[style]
        if how == 1 or (how == 0 and ord(ch) > 0x7F):
            out.append(_escape(ch, rng.random() < 0.5))
        elif ch in '"\\' or ord(ch) < 0x20:
            out.append(json.dumps(ch)[1:-1])
        elif how == 2 and ch == "/":
            out.append("\\/")
        else:
            out.append(ch)
    if surrogates and rng.randrange(4) == 0:
        out.insert(rng.randint(1, len(out)), rng.choice(_LONE))
    return "".join(out) + '"'


def _render(node: object, rng: random.Random, how: tuple[bool, bool, bool]) -> str:
    """The tree written out; how: (a member repeated now and then, lone surrogates, raw strings)."""
    duplicates, surrogates, raw = how
    space = rng.choice(_SPACES)
    if isinstance(node, Obj):
        members = list(node)
        if duplicates and members and rng.randrange(2) == 0:
            key, value = rng.choice(members)
            members.insert(rng.randint(0, len(members)), (key, rng.choice([value, None, 1])))
        parts = [
            f"{_string(k, rng, surrogates, raw)}{space}:{rng.choice(_SPACES)}{_render(v, rng, how)}"
            for k, v in members
        ]
        return "{" + space + ("," + space).join(parts) + rng.choice(_SPACES) + "}"
    if isinstance(node, list):
        return "[" + ",".join(f"{space}{_render(v, rng, how)}" for v in node) + "]"
    if isinstance(node, Num):
        return str(node)
    if isinstance(node, str):
        return _string(node, rng, surrogates, raw)
    return json.dumps(node)


@st.composite
def _value(draw: st.DrawFn, schema: RecordSchema) -> bytes:
    if _one_in(draw, 20):
        return draw(st.binary(max_size=64))
    tree = draw(_tree(schema))
    how = (_one_in(draw, 3), _one_in(draw, 10), draw(st.integers(0, 9)) % 2 == 1)
    rng = random.Random(draw(st.integers(0, 2**32)))  # how it is written: one draw, not one per character
    value = _render(tree, rng, how).encode("utf-8", "surrogatepass")
    if _one_in(draw, 20):  # a byte changed, dropped or added
        at = draw(st.integers(0, len(value)))
        byte = bytes([draw(st.sampled_from(b'{}[]",:\\0 \x00\xff\xc3e.-'))])
        value = value[:at] + draw(st.sampled_from([byte, b""])) + value[at + draw(st.integers(0, 1)) :]
    return value


@pytest.mark.parametrize("name", list(DECLARATIONS))
def test_hypothesis_documents_get_the_same_answers(name):
    fast, _ = CHECKS[name, 1_000_000]
    outcomes: set[str] = set()
    accepted = [0, 0]  # valid records the fast path answered itself; of them, with undeclared members
    declared = {c.path[0] for c in DECLARATIONS[name].columns}

    @settings(
        max_examples=400,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(_value(DECLARATIONS[name]))
    def run(value: bytes) -> None:
        before = fast.fallbacks
        error, _ = assert_same(name, value)
        outcomes.add(error.split(":")[0] if error else "valid")
        if error is None and fast.fallbacks == before:
            accepted[0] += 1
            accepted[1] += not declared.issuperset(json.loads(value))

    run()
    # The generator is only worth its runs if they reach valid records the fast path accepts, and
    # rejections of each kind.
    assert accepted[0] > 0 and accepted[1] > 0, (name, accepted)
    assert {"valid", "not JSON", "missing field", "mistyped field"} <= outcomes, outcomes


def _plain(node: object) -> object:
    if isinstance(node, Obj):
        return {k: _plain(v) for k, v in node}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return float(node) if isinstance(node, Num) else node


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(_UNDECLARED_KEYS, _ANY), max_size=4).map(Obj))
def test_the_second_step_counts_in_c_what_the_walk_counts(tree):
    # msgspec writes a ':' after each key and escapes none in a string: its output's colons are the
    # members and the strings' colons, as `colons_in` walks them.
    doc = _plain(tree)
    assert msgspec.json.encode(doc).count(b":") == compiled.colons_in(doc, 0)
