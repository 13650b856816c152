"""Declared columns without Spark: every type, rule and path a declaration may use, and its refusals."""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from eosflow.schema.arrow import array_literal, json_text, to_arrow
from eosflow.schema.declaration import DeclarationError, parse_schema
from eosflow.schema.record import RecordCheck
from tests.clicks import click_columns

CLICKS = {
    "columns": click_columns("payload")
    + [{"name": "first_sku", "type": "integer", "source": "$.items[0]['s k u']", "max": 99}],
    "business_key": "click_id",
}
SCHEMA = parse_schema(CLICKS, "test")
CHECK = RecordCheck(SCHEMA, 4096)
NAMES = [c.name for c in SCHEMA.columns]
GOOD = {
    "click_id": "0b9a4f3e-5c6d-4e7f-8a9b-0c1d2e3f4a5b",
    "url": "https://example.com/a",
    "ts": "2026-01-01T10:00:00+01:00",
    "customer": {"id": "c-1"},
    "n_items": 3,
    "price": 12.5,
    "kind": "add",
    "tags": ["a", 'b "q"', "c\\d"],
    "payload": {"x": [1, None, "y"], "z": 1.5},
    "ok": False,
    "day": "2026-02-28",
    "score": 0.25,
    "items": [{"s k u": 7}],
}


def check(doc: dict) -> tuple[str | None, list | None]:
    return CHECK(json.dumps(doc).encode())


def typed(doc: dict) -> dict:
    error, values = check(doc)
    assert error is None, error
    return dict(zip(NAMES, values, strict=True))


def test_a_record_of_every_type_is_typed_exactly():
    row = typed(GOOD)
    assert row["ts"] == datetime(2026, 1, 1, 9, tzinfo=UTC)
    assert row["customer"] == "c-1" and row["first_sku"] == 7
    assert row["price"] == Decimal("12.5") and row["score"] == 0.25
    assert row["day"] == date(2026, 2, 28) and row["ok"] is False
    assert row["tags"] == ["a", 'b "q"', "c\\d"]


def test_optional_columns_absent_or_null_are_null():
    doc = {k: GOOD[k] for k in ("click_id", "url", "ts")} | {"kind": None, "items": []}
    assert typed(doc) == {**dict.fromkeys(NAMES), "click_id": GOOD["click_id"], "url": GOOD["url"]} | {
        "ts": datetime(2026, 1, 1, 9, tzinfo=UTC)
    }


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"click_id": None}, "missing field: click_id"),
        ({"url": 5}, "mistyped field: url (expected string)"),
        ({"url": "ftp://x"}, "invalid value: url (does not match ^https?://)"),
        ({"url": "https://x\x00"}, "invalid value: url (holds a NUL character"),
        ({"ts": "2026-01-01T10:00:00"}, "mistyped field: ts (expected ISO-8601"),
        ({"customer": {"id": 7}}, "mistyped field: customer ($.customer.id) (expected string)"),
        ({"n_items": -1}, "invalid value: n_items (must be >= 0, got -1)"),
        ({"n_items": 1.0}, "mistyped field: n_items (expected 64-bit integer)"),
        ({"n_items": "3"}, "mistyped field: n_items (expected 64-bit integer)"),
        ({"price": 1.234}, "invalid value: price (more than 2 decimal places, got 1.234)"),
        ({"price": 10**10}, "invalid value: price (more than 10 digits before the point"),
        ({"price": "12.50"}, "mistyped field: price (expected number)"),
        ({"kind": "buyy"}, "invalid value: kind (not one of view, add, buy)"),
        ({"tags": "a"}, "mistyped field: tags (expected array of string)"),
        ({"tags": ["a", None]}, "mistyped field: tags (expected array of string)"),
        ({"tags": ["a", 1]}, "mistyped field: tags (expected array of string)"),
        ({"tags": ["a\x00"]}, "invalid value: tags (holds a NUL character"),
        ({"payload": {"k\x00": 1}}, "invalid value: payload (holds a NUL character, which Postgres jsonb"),
        ({"ok": 0}, "mistyped field: ok (expected true or false)"),
        ({"day": "2026-02-30"}, "mistyped field: day (expected date string YYYY-MM-DD)"),
        ({"day": "0000-01-01"}, "mistyped field: day"),
        ({"score": True}, "mistyped field: score (expected number)"),
        ({"score": 2**64 + 1}, "mistyped field: score (expected number)"),  # no exact double
        (
            {"items": [{"s k u": 100}]},
            "invalid value: first_sku ($.items[0]['s k u']) (must be <= 99, got 100)",
        ),
        ({"items": [{"s k u": 2**31}]}, "mistyped field: first_sku ($.items[0]['s k u']) (expected 32-bit"),
    ],
)
def test_each_rule_rejects_with_its_reason(changes, error):
    found, values = check({**GOOD, **changes})
    assert values is None and found is not None and found.startswith(error), found


def test_missing_comes_before_mistyped_before_invalid_across_columns():
    assert check({**GOOD, "kind": "nope", "url": 1, "ts": None})[0] == "missing field: ts"
    assert check({**GOOD, "kind": "nope", "url": 1})[0].startswith("mistyped field: url")


def test_a_path_through_something_that_is_not_an_object_is_missing():
    assert typed({**GOOD, "customer": "c-1"})["customer"] is None  # optional: NULL
    schema = parse_schema(
        {"columns": [{"name": "c", "type": "text", "required": True, "source": "$.a.b"}]}, "t"
    )
    assert RecordCheck(schema, 100)(b'{"a": [1]}')[0] == "missing field: c ($.a.b)"


def test_numerics_beyond_15_digits_are_read_exactly():
    schema = parse_schema(
        {"columns": [{"name": "n", "type": "numeric(30,10)"}, {"name": "j", "type": "jsonb"}]}, "t"
    )
    error, values = RecordCheck(schema, 1000)(
        b'{"n": 12345678901234567890.0123456789, "j": [0.10000000000000000001]}'
    )
    assert error is None
    assert values[0] == Decimal("12345678901234567890.0123456789")
    assert json_text(values[1]) == "[0.10000000000000000001]"  # jsonb keeps the number as written


def test_the_compiled_check_and_the_rules_agree_on_random_documents():
    candidates = {
        "click_id": [GOOD["click_id"], GOOD["click_id"].upper(), None, 3],
        "url": [GOOD["url"], "ftp://x", None, "https://\x00"],
        "ts": [GOOD["ts"], "0001-01-01T00:00:00+00:01", "x", None],
        "customer": [{"id": "c"}, {"id": 1}, "c", None],
        "n_items": [1, -1, 2**63, True, None],
        "price": [1.5, 1.555, 10**11, "1", None],
        "kind": ["view", "no", None, 1],
        "tags": [["a"], ["a", None], "a", [], None],
        "payload": [{"a": 1}, ["\x00"], None, 0],
        "ok": [True, 1, None],
        "day": ["2026-01-01", "2026-13-01", None],
        "score": [1, 1.5, 2**64 + 1, None, False],
        "items": [[{"s k u": 1}], [{"s k u": 100}], [], None],
    }
    rng = random.Random(7)
    outcomes = set()
    for _ in range(5_000):
        doc = {k: (v[0] if rng.random() < 0.7 else rng.choice(v)) for k, v in candidates.items()}
        fast, error = CHECK.typed(doc), CHECK.first_error(doc)
        assert fast == CHECK.typed_by_rules(doc), doc
        assert (fast is None) == (error is not None), (doc, error)
        outcomes.add(error.split(":")[0] if error else "valid")
    assert outcomes == {"valid", "missing field", "mistyped field", "invalid value"}


def test_typed_values_become_the_arrow_and_literal_forms_postgres_reads():
    row = typed(GOOD)
    columns = {c.name: c for c in SCHEMA.columns}
    assert to_arrow(columns["tags"], [row["tags"], None]).to_pylist() == ['{"a","b \\"q\\"","c\\\\d"}', None]
    assert to_arrow(columns["price"], [row["price"]]).type == pa.decimal128(12, 2)
    assert to_arrow(columns["payload"], [row["payload"]]).to_pylist() == ['{"x":[1,null,"y"],"z":1.5}']
    assert array_literal([datetime(2026, 1, 1, tzinfo=UTC)], "timestamptz") == '{"2026-01-01T00:00:00+00:00"}'


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"columns": []}, "columns must be a list"),
        ({"columns": [{"name": "a", "type": "varchar"}]}, "type 'varchar' unknown; known: text, uuid"),
        ({"columns": [{"name": "a", "type": "numeric(40,2)"}]}, "1 <= p <= 38"),
        ({"columns": [{"name": "a", "type": "jsonb[]"}]}, "arrays hold scalars only"),
        ({"columns": [{"name": "A", "type": "text"}]}, "lower-case letters"),
        ({"columns": [{"name": "kafka_offset", "type": "bigint"}]}, "one of eosflow's own columns"),
        ({"columns": [{"name": "a", "type": "text"}, {"name": "a", "type": "text"}]}, "declared twice"),
        ({"columns": [{"name": "a", "type": "text", "pattern": "("}]}, "not a regular expression"),
        ({"columns": [{"name": "a", "type": "bigint", "enum": ["x"]}]}, "enum value 'x' is not a bigint"),
        ({"columns": [{"name": "a", "type": "text", "min": 1}]}, "min applies to bigint"),
        ({"columns": [{"name": "a", "type": "bigint", "min": 5, "max": 1}]}, "min 5 is above max 1"),
        ({"columns": [{"name": "a", "type": "double", "max": float("inf")}]}, "max inf is not a finite"),
        ({"columns": [{"name": "a", "type": "double", "min": float("nan")}]}, "min nan is not a finite"),
        ({"columns": [{"name": "a", "type": "text", "source": "customer.id"}]}, "starting with $"),
        ({"columns": [{"name": "a", "type": "text", "source": "$.a..b"}]}, "cannot be followed at '..b'"),
        ({"columns": [{"name": "a", "type": "text", "required": "yes"}]}, "required must be true or false"),
        ({"columns": [{"name": "a", "type": "text", "nullable": True}]}, "unknown setting(s) ['nullable']"),
        (
            {"columns": [{"name": "a", "type": "text"}], "business_key": "b"},
            "business_key 'b' is not a declared",
        ),
        (
            {"columns": [{"name": "a", "type": "text"}], "business_key": "a"},
            "must be a required scalar column",
        ),
        ({"columns": [{"name": "a", "type": "text"}], "format": "xml"}, "format 'xml' unknown"),
        ({"columns": [{"name": "a", "type": "text"}], "key": "int"}, "key 'int' unknown"),
    ],
)
def test_a_declaration_eosflow_cannot_honour_is_refused_naming_the_column_and_setting(spec, message):
    with pytest.raises(DeclarationError) as refused:
        parse_schema(spec, "pipelines.yml: pipeline 'p'")
    assert message in str(refused.value) and "pipeline 'p'" in str(refused.value), str(refused.value)


def test_a_check_shipped_to_a_spark_worker_still_tells_bad_values_from_good_ones():
    # Spark pickles the check by value (cloudpickle): the "not this type" marker must stay one object,
    # or a mistyped numeric reaches the storability rule and the whole task fails.
    from pyspark import cloudpickle

    shipped = cloudpickle.loads(cloudpickle.dumps(RecordCheck(SCHEMA, 4096)))
    cases = [({"price": "1.00"}, "mistyped field: price"), ({"tags": [1]}, "mistyped field: tags")]
    for changes, error in cases:
        found, values = shipped(json.dumps({**GOOD, **changes}).encode())
        assert values is None and found.startswith(error), found
    assert shipped(json.dumps(GOOD).encode())[0] is None


@pytest.mark.parametrize("compiled", [True, False])
def test_a_deeply_nested_member_with_an_escape_gets_a_verdict_not_an_exception(compiled):
    """json reads a document nested hundreds deep; the lone-surrogate walk after it recursed, and raised
    RecursionError out of the check (a failed task, a stuck pipeline) once an escape was in the text."""
    check = RecordCheck(SCHEMA, 1 << 20, compiled=compiled)
    deep = "[" * 900 + '"\\u00e9"' + "]" * 900
    good = json.dumps(GOOD)[:-1] + f', "extra": {deep}}}'
    error, typed = check.check_value(good.encode())
    assert error is None and typed is not None
    lone = "[" * 900 + '"\\ud800"' + "]" * 900  # a lone surrogate that deep is still found
    error, typed = check.check_value((json.dumps(GOOD)[:-1] + f', "extra": {lone}}}').encode())
    assert error is not None and error.startswith("not JSON") and typed is None
