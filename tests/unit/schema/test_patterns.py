"""Declared patterns (`pattern`, `text_pattern`) run in RE2: time linear in the value, whatever the
pattern; what RE2 cannot run is refused when the declaration is read, the construct named."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from pyspark import cloudpickle

from eosflow.schema.declaration import DeclarationError, parse_schema
from eosflow.schema.record import RecordCheck
from eosflow.schema.text import NOT_MATCHING
from eosflow.transform import BatchCheck

# Python's re backtracks over this: 26 characters took 6.8 s, four times more per two more.
CATASTROPHIC = "^(a+)+$"


def _json_check(compiled: bool) -> RecordCheck:
    spec = {"columns": [{"name": "s", "type": "text", "required": True, "pattern": CATASTROPHIC}]}
    return RecordCheck(parse_schema(spec, "test"), 4096, compiled=compiled)


@pytest.mark.timeout(30, method="thread")  # the old engine would run for hours: fail, do not hang
@pytest.mark.parametrize("compiled", [True, False])
def test_a_catastrophic_pattern_checks_a_long_value_at_once(compiled):
    check = _json_check(compiled)
    started = time.monotonic()
    assert check(b'{"s": "' + b"a" * 40 + b'!"}') == (
        f"invalid value: s (does not match {CATASTROPHIC})",
        None,
    )
    assert check(b'{"s": "' + b"a" * 40 + b'"}') == (None, ["a" * 40])
    assert check(b'{"s": ["' + b"a" * 40 + b'!"]}')[0] == "mistyped field: s (expected string)"
    assert time.monotonic() - started < 5


@pytest.mark.timeout(30, method="thread")
def test_a_catastrophic_text_pattern_checks_a_long_line_at_once():
    spec = {
        "format": "text",
        "text_pattern": r"(?P<s>(a+)+)",
        "columns": [{"name": "s", "type": "text", "required": True}],
    }
    check = RecordCheck(parse_schema(spec, "test"), 4096)
    started = time.monotonic()
    assert check(b"a" * 40 + b"!") == (NOT_MATCHING, None)
    assert check(b"a" * 40) == (None, ["a" * 40])
    assert time.monotonic() - started < 5


@pytest.mark.timeout(30, method="thread")
def test_each_element_of_a_text_array_is_matched_in_re2_too():
    spec = {"columns": [{"name": "s", "type": "text[]", "pattern": CATASTROPHIC}]}
    check = RecordCheck(parse_schema(spec, "test"), 4096)
    started = time.monotonic()
    assert check(b'{"s": ["aa", "' + b"a" * 40 + b'!"]}') == (
        f"invalid value: s (does not match {CATASTROPHIC})",
        None,
    )
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        (r"^(a)\1$", "a backreference"),
        (r"^(?P<x>a)(?P=x)$", "a backreference"),
        (r"^(?=a)", "a look-ahead or look-behind"),
        (r"(?<=a)b", "a look-ahead or look-behind"),
        (r"^(?!test)", "a negative look-ahead or look-behind"),
        (r"(?<!a)b", "a negative look-ahead or look-behind"),
        (r"^(?>a+)", "an atomic group"),
        (r"^a++$", "a possessive quantifier"),
        (r"(?x) a b", "verbose mode"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_when_read_naming_the_construct(pattern, named):
    spec = {"columns": [{"name": "s", "type": "text", "pattern": pattern}]}
    with pytest.raises(DeclarationError) as err:
        parse_schema(spec, "orders")
    message = str(err.value)
    assert f"orders: column 1 (s): pattern {pattern!r} uses {named}" in message
    assert "which RE2 cannot run" in message


def test_a_text_pattern_re2_cannot_run_is_refused_likewise():
    spec = {
        "format": "text",
        "text_pattern": r"(?P<a>x)(?=y)",
        "columns": [{"name": "a", "type": "text"}],
    }
    with pytest.raises(DeclarationError, match=r"text_pattern .* uses a look-ahead or look-behind"):
        parse_schema(spec, "logs")


def test_a_pattern_that_is_no_regular_expression_at_all_is_refused_with_re2s_reason():
    spec = {"columns": [{"name": "s", "type": "text", "pattern": "("}]}
    with pytest.raises(
        DeclarationError, match=r"pattern '\(' is not a regular expression RE2 runs: missing \)"
    ):
        parse_schema(spec, "orders")


@pytest.mark.parametrize("compiled", [True, False])
def test_patterns_that_worked_keep_their_meaning(compiled):
    """search, as before: anywhere in the value unless anchored; flags and classes as in Python."""

    def one(pattern: str, value: str) -> bool:
        spec = {"columns": [{"name": "s", "type": "text", "required": True, "pattern": pattern}]}
        check = RecordCheck(parse_schema(spec, "test"), 4096, compiled=compiled)
        return check(b'{"s": "' + value.encode() + b'"}')[0] is None

    assert one("^[A-Z]{3}", "USDollars") and not one("^[A-Z]{3}", "usd")
    assert one("[0-9]{3}", "ab123") and not one("^[0-9]{3}$", "ab123")
    assert one("(?i)^usd$", "USD") and one(r"^\w+@\w+\.com$", "a_b@x.com")
    assert one("^é+$", "ééé") and not one("^.$", "éé")  # characters, not bytes
    # RE2's $ is the end of the value; Python's also matched before a final newline.
    assert not one("^[A-Z]{3}$", "USD\\n")
    # Python's \Z (the very end, no newline) is RE2's \z: read as such, not refused.
    assert one("^[A-Z]{3}\\Z", "USD") and not one("^[A-Z]{3}\\Z", "USD\\n") and one("\\\\Z", "a\\\\Z")


def test_named_groups_of_a_text_pattern_still_fill_their_columns():
    spec = {
        "format": "text",
        "text_pattern": r"(?P<level>[A-Z]+)(?: (?P<code>[0-9]+))?: (?P<message>.*)",
        "columns": [
            {"name": "level", "type": "text", "required": True},
            {"name": "code", "type": "integer"},
            {"name": "message", "type": "text"},
        ],
    }
    check = RecordCheck(parse_schema(spec, "test"), 4096)
    assert check("WARN 503: déjà vu".encode()) == (None, ["WARN", 503, "déjà vu"])
    assert check(b"INFO: ok") == (None, ["INFO", None, "ok"])
    assert check(b"info: ok") == (NOT_MATCHING, None)


def test_a_check_with_patterns_shipped_to_a_spark_worker_compiles_them_again_there():
    spec = {
        "columns": [
            {"name": "s", "type": "text", "required": True, "pattern": "^[a-z]+$"},
            {"name": "t", "type": "text", "enum": ["x1", "y1"], "pattern": "^x"},
        ]
    }
    batch_check = BatchCheck("p", "b", "v1", 4096, parse_schema(spec, "test"))
    shipped = cloudpickle.loads(cloudpickle.dumps(batch_check))
    assert shipped.schema == batch_check.schema
    record = cloudpickle.loads(cloudpickle.dumps(RecordCheck(batch_check.schema, 4096)))
    assert record(b'{"s": "abc", "t": "x1"}') == (None, ["abc", "x1"])
    assert record(b'{"s": "abc", "t": "y1"}')[0] == "invalid value: t (does not match ^x)"
    assert record(b'{"s": "abc", "t": "z"}')[0] == "invalid value: t (not one of x1, y1)"
    assert record(b'{"s": "ab1"}')[0] == "invalid value: s (does not match ^[a-z]+$)"
    rows = pa.RecordBatch.from_pylist(
        [
            {
                "key": None,
                "value": b'{"s": "ab1"}',
                "topic": "t",
                "partition": 0,
                "offset": 0,
                "timestamp": 0,
                "kafka_headers": "[]",
            }
        ]
    )
    assert shipped.records(rows).results == [("invalid value: s (does not match ^[a-z]+$)", None)]
