"""A column made text from another type by explicit choice (`text_from`; eosflow.schema.text_from): what it
takes, through every record path, and how the evolution rules and Postgres's migration treat it. Its texts
are held to Postgres's own output in tests/integration/test_text_from.py."""

from __future__ import annotations

import pytest

from eosflow.schema import ddl, evolution
from eosflow.schema.declaration import DeclarationError, parse_schema
from eosflow.schema.record import RecordCheck
from eosflow.schema.text_from import text_from
from eosflow.schema.types import BAD

COLUMNS = [
    {"name": "id", "type": "text", "required": True, "text_from": "bigint"},
    {"name": "amount", "type": "text", "text_from": "double"},
    {"name": "at", "type": "text", "text_from": "timestamptz"},
    {"name": "price", "type": "text", "text_from": "numeric(10,2)"},
    {"name": "ok", "type": "text", "text_from": "boolean", "pattern": "^[a-z]+$"},
]


def test_a_string_is_itself_a_value_of_the_old_type_its_text_and_anything_else_no_value():
    ts = text_from("timestamptz")
    assert ts.accept("yesterday") == "yesterday"
    assert ts.accept("2026-11-28T05:00:00.5+01:00") == "2026-11-28 04:00:00.5+00"  # as Postgres writes it
    assert ts.accept(5) is BAD
    big = text_from("bigint")
    assert (big.accept(42), big.accept("A-42"), big.accept(True), big.accept(1.5)) == ("42", "A-42", BAD, BAD)
    price = text_from("numeric(10,2)")
    assert (price.accept(12.5), price.accept(1.234)) == ("12.50", BAD)  # 1.234: never storable before
    assert text_from("double").accept(1e15) == "1e+15"
    assert text_from("boolean").accept(False) == "false"
    assert (text_from("bigint").declared, text_from("bigint").postgres, text_from("bigint").text_from) == (
        "text",
        "text",
        "bigint",
    )


@pytest.mark.parametrize("compiled", [True, False])
def test_json_records_get_the_same_rows_through_the_fast_path_and_the_python_check(compiled):
    check = RecordCheck(parse_schema({"format": "json", "columns": COLUMNS}, "p"), 4096, compiled=compiled)
    old = b'{"id": 7, "amount": 0.1, "at": "2026-11-28T04:00:00Z", "price": 3, "ok": true}'
    new = b'{"id": "A-7", "amount": "n/a", "at": "soon", "price": "free", "ok": "maybe"}'
    assert check(old) == (None, ["7", "0.1", "2026-11-28 04:00:00+00", "3.00", "true"])
    assert check(new) == (None, ["A-7", "n/a", "soon", "free", "maybe"])
    assert (
        check(b'{"id": 1.5}')[0]
        == "mistyped field: id (expected string, or 64-bit integer (kept as its text))"
    )
    assert check(b'{"id": "x", "ok": "Yes"}')[0].startswith("invalid value: ok (does not match")  # its rules


def test_a_text_value_is_read_as_the_old_type_read_it():
    spec = {
        "format": "text",
        "columns": [{"name": "v", "type": "text", "required": True, "text_from": "double"}],
    }
    check = RecordCheck(parse_schema(spec, "p"), 4096)
    assert check(b"1.50") == (None, ["1.5"])  # stored as the double 1.5, whose text the ALTER wrote
    assert check(b"n/a") == (None, ["n/a"])


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ({"type": "bigint", "text_from": "integer"}, "text_from goes with type: text"),
        ({"type": "text", "text_from": "jsonb"}, "text_from 'jsonb': a text column takes the values of"),
        ({"type": "text", "text_from": "text"}, "not text, jsonb, bytea or an array"),
        ({"type": "text", "text_from": "bigint[]"}, "not text, jsonb, bytea or an array"),
        ({"type": "text", "text_from": "long"}, "text_from 'long': type 'long' unknown"),
    ],
)
def test_a_text_from_the_column_cannot_take_is_refused(column, message):
    with pytest.raises(DeclarationError, match=message):
        parse_schema({"columns": [{"name": "v", **column}]}, "p")


def _existing(schema) -> list[ddl.Existing]:
    spelled = {"double": "double precision", "timestamptz": "timestamp with time zone"}
    return [ddl.Existing(n, spelled.get(t, t), nn) for n, t, nn in ddl.target_columns(schema)]


def test_postgres_makes_the_column_text_under_the_settings_its_old_types_text_depends_on():
    old = parse_schema(
        {"columns": [{"name": "at", "type": "timestamptz"}, {"name": "n", "type": "bigint"}]}, "p"
    )
    new = parse_schema(
        {
            "columns": [
                {"name": "at", "type": "text", "text_from": "timestamptz"},
                {"name": "n", "type": "bigint"},
            ]
        },
        "p",
    )
    migration = ddl.migration("raw.t", new, _existing(old), "p")
    texts = [s.as_string() for s in migration.statements]
    assert texts == [
        "select set_config('TimeZone', 'UTC', true)",
        "select set_config('DateStyle', 'ISO, YMD', true)",
        "select set_config('extra_float_digits', '1', true)",
        'alter table "raw"."t" alter column "at" type text',
    ]
    assert migration.retypes and migration.notes == ["raw.t: widened column at from timestamptz to text"]


def test_without_the_choice_text_is_refused_naming_it_and_iceberg_refuses_it_either_way():
    old = parse_schema({"columns": [{"name": "n", "type": "bigint"}, {"name": "j", "type": "jsonb"}]}, "p")
    new = parse_schema({"columns": [{"name": "n", "type": "text"}, {"name": "j", "type": "text"}]}, "p")
    with pytest.raises(ddl.IncompatibleTargetError) as refused:
        ddl.migration("raw.t", new, _existing(old), "p")
    message = str(refused.value)
    assert "column n is bigint in the target but declared text (declare `text_from: bigint`" in message
    assert "`alter table raw.t alter column j type text using j::text`" in message  # jsonb: no text_from
    # Iceberg's columns carry no choice (it promotes no type to a string): a type change it refuses.
    found = evolution.evolve(
        [evolution.Column("n", "text", False)],
        [evolution.Column("n", "bigint", False)],
        widening=evolution.iceberg_promotes,
    )
    assert [str(r) for r in found.refusals] == ["column n is bigint in the target but declared text"]
    chosen = evolution.evolve(
        [evolution.Column("n", "text", False, "bigint")], [evolution.Column("n", "bigint", False)]
    )
    assert [str(c) for c in chosen.changes] == ["widened column n from bigint to text"]
