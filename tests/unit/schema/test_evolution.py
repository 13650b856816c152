"""The evolution rules (docs/DESIGN.md, "Declarations that evolve"), and Postgres statements made of them."""

from __future__ import annotations

from decimal import Context, Decimal, InvalidOperation

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eosflow.schema import ddl
from eosflow.schema.declaration import parse_schema
from eosflow.schema.evolution import Column, Kind, Problem, evolve, iceberg_promotes, numeric, widens


def _kinds(found) -> list[tuple[str, str]]:
    return [(c.kind.value, c.column) for c in found.changes]


def test_a_new_optional_column_is_added_and_a_new_required_one_refused():
    have = [Column("id", "bigint", True)]
    found = evolve([*have, Column("note", "text", False)], have)
    assert (_kinds(found), found.refusals) == ([("add", "note")], ())
    found = evolve([*have, Column("note", "text", True)], have)
    assert [(r.problem, r.column) for r in found.refusals] == [(Problem.NEW_REQUIRED, "note")]


@pytest.mark.parametrize(
    ("have", "want", "postgres", "iceberg"),
    [
        ("integer", "bigint", True, True),
        ("integer", "double", True, False),  # Iceberg promotes int to long only
        ("bigint", "double", False, False),  # above 2^53 a double rounds
        ("bigint", "integer", False, False),
        ("numeric(10,2)", "numeric(12,2)", True, True),
        ("numeric(10,2)", "numeric(12,4)", True, False),  # Iceberg keeps a decimal's scale
        ("numeric(10,2)", "numeric(10,3)", False, False),  # one digit fewer before the point
        ("numeric(10,2)", "numeric(12,1)", False, False),  # rounds
        ("text", "uuid", False, False),
        ("integer", "text", False, False),  # text from a scalar: not yet
        ("integer[]", "bigint[]", True, True),  # an array's element by the same rules
        ("integer[]", "double[]", True, False),
        ("numeric(10,2)[]", "numeric(12,2)[]", True, True),
        ("bigint[]", "integer[]", False, False),
        ("integer", "bigint[]", False, False),  # a scalar is no array
        ("integer[]", "bigint", False, False),
    ],
)
def test_widenings_are_those_that_keep_every_value(have, want, postgres, iceberg):
    assert (widens(have, want), iceberg_promotes(have, want)) == (postgres, iceberg)


@given(
    st.integers(1, 38).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, p))),
    st.integers(1, 38).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, p))),
)
def test_a_numeric_widening_keeps_the_largest_value_of_the_old_type_exactly(old, new):
    """The old type's largest value, with every digit used, fits the new one unchanged iff widens says so."""
    (p, s), (p2, s2) = old, new
    wide = Context(prec=80)
    largest = wide.subtract(wide.power(10, p - s), Decimal(10) ** -s)  # numeric(5,2): 999.99
    try:  # numeric(p2,s2) holds it unchanged: at scale s2 within p2 digits, nothing rounded
        fits = largest.quantize(Decimal(10) ** -s2, context=Context(prec=p2)) == largest
    except InvalidOperation:
        fits = False
    assert widens(f"numeric({p},{s})", f"numeric({p2},{s2})") == fits
    assert numeric(f"numeric({p}, {s})") == (p, s)


def test_a_type_change_that_is_no_widening_is_refused_naming_both_types():
    found = evolve([Column("n", "integer", False)], [Column("n", "bigint", False)])
    (refusal,) = found.refusals
    assert (refusal.problem, refusal.have, refusal.want) == (Problem.TYPE, "bigint", "integer")
    assert str(refusal) == "column n is bigint in the target but declared integer"


def test_a_change_streams_changelog_widens_its_key_and_columns_as_any_target():
    """Its state table follows in the same transaction (tests/integration/test_change_streams.py)."""
    schema = parse_schema(
        {
            "format": "json",
            "changes": "debezium",
            "primary_key": ["id"],
            "columns": [
                {"name": "id", "type": "bigint", "required": True},
                {"name": "tags", "type": "bigint[]"},
            ],
        },
        "p",
    )
    old = [
        ddl.Existing(n, {"id": "integer", "tags": "integer[]"}.get(n, t), nn)
        for n, t, nn in ddl.target_columns(schema)
    ]
    texts = [s.as_string() for s in ddl.migration("raw.c", schema, old, "p").statements]
    assert texts == [
        'alter table "raw"."c" alter column "id" type bigint',
        'alter table "raw"."c" alter column "tags" type bigint[]',
    ]


def test_required_to_optional_relaxes_and_optional_to_required_is_refused():
    assert _kinds(evolve([Column("n", "text", False)], [Column("n", "text", True)])) == [("relax", "n")]
    found = evolve([Column("n", "text", True)], [Column("n", "text", False)])
    assert [r.problem for r in found.refusals] == [Problem.REQUIRED]


def test_a_column_no_longer_declared_is_retired_every_time():
    found = evolve(
        [Column("id", "bigint", True)], [Column("id", "bigint", True), Column("gone", "text", True)]
    )
    assert (_kinds(found), found.refusals) == ([("retire", "gone")], ())


def test_a_new_column_reading_a_removed_ones_source_is_a_rename_and_refused():
    target = [Column("amount", "bigint", False)]
    found = evolve([Column("total", "bigint", False)], target, renamed={"total": "amount"})
    assert [(r.problem, r.column, r.have) for r in found.refusals] == [(Problem.RENAMED, "total", "amount")]
    assert _kinds(found) == [("retire", "amount")]


def _schema(columns: list[dict]):
    return parse_schema({"format": "json", "columns": columns}, "p")


def _existing(schema) -> list[ddl.Existing]:
    spelled = {"double precision": "double precision", "timestamptz": "timestamp with time zone"}
    return [ddl.Existing(n, spelled.get(t, t), nn) for n, t, nn in ddl.target_columns(schema)]


def test_postgres_widens_relaxes_and_retires_with_one_statement_each():
    old = _schema(
        [
            {"name": "id", "type": "integer", "required": True},
            {"name": "price", "type": "numeric(10,2)", "required": True},
            {"name": "gone", "type": "text", "required": True},
            {"name": "at", "type": "timestamptz"},
        ]
    )
    new = _schema(
        [
            {"name": "id", "type": "bigint", "required": True},
            {"name": "price", "type": "numeric(14,3)"},
            {"name": "at", "type": "timestamptz"},
        ]
    )
    migration = ddl.migration("raw.orders", new, _existing(old), "orders")
    texts = [s.as_string() for s in migration.statements]
    assert texts == [
        'alter table "raw"."orders" alter column "id" type bigint',
        'alter table "raw"."orders" alter column "price" type numeric(14,3)',
        'alter table "raw"."orders" alter column "price" drop not null',
        'alter table "raw"."orders" alter column "gone" drop not null',
    ]
    assert "raw.orders: column gone is no longer declared: kept, NULL in rows from now on" in migration.notes
    # The next run: the target fits, and only the retired column is named again.
    after = [e if e.name != "gone" else ddl.Existing("gone", "text", False) for e in _existing(new)]
    again = ddl.migration("raw.orders", new, [*after, ddl.Existing("gone", "text", False)], "orders")
    assert (again.statements, len(again.notes)) == ([], 1)


def test_postgres_refusals_name_the_statement_that_would_make_the_target_fit():
    old = _schema([{"name": "n", "type": "numeric(12,4)"}, {"name": "id", "type": "bigint"}])
    new = _schema([{"name": "n", "type": "numeric(12,2)"}, {"name": "id", "type": "uuid", "required": True}])
    with pytest.raises(ddl.IncompatibleTargetError) as refused:
        ddl.migration("raw.t", new, _existing(old), "p")
    message = str(refused.value)
    assert "`alter table raw.t alter column n type numeric(12,2) using n::numeric(12,2)`" in message
    assert "it rounds every value to 2 decimals" in message
    assert "`alter table raw.t alter column id type uuid using id::uuid`" in message
    assert "`alter table raw.t alter column id set not null`" in message
    assert "re-ingest into a new table: declare a new pipeline" in message


def test_a_kind_is_spelled_as_the_log_says_it():
    assert [k.value for k in Kind] == ["add", "widen", "relax", "retire"]
