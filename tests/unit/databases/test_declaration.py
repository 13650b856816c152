"""A `database:` entry: a table's columns read from Debezium's own schema block (a record Debezium 3.6.1
wrote, kept in tests/unit/data), and each member's pipeline spec derived from the entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eosflow.databases import declaration
from eosflow.databases.discover import _merge, _shape_of
from eosflow.databases.schema_block import SchemaBlockError, TableShape, shape
from eosflow.errors import PipelineConfigError

RECORD = json.loads((Path(__file__).parents[1] / "data" / "debezium_change_with_schema.json").read_text())


def _types(found: TableShape) -> dict[str, str]:
    return {c["name"]: c["type"] for c in found.columns}


def test_debeziums_schema_block_declares_each_column_it_has_a_type_for():
    found = shape(RECORD["key"]["schema"], RECORD["value"]["schema"])
    assert found.primary_key == ("id",)
    assert _types(found) == {
        "id": "bigint",
        "name": "text",  # the source's "Name", read from its own field
        "bal": "numeric(12,2)",  # NUMERIC(12,2), told by column.propagate.source.type
        "amt": "text",  # an unbounded numeric keeps its digits as text
        "seen": "timestamptz",
        "ts": "timestamptz",  # MicroTimestamp: a timestamp without zone, read as UTC
        "d": "date",
        "tags": "text[]",
        "ints": "integer[]",
        "j": "jsonb",
        "u": "uuid",
        "b": "bytea",
        "f": "double",
        "sm": "integer",
        "ok": "boolean",
    }
    by_name = {c["name"]: c for c in found.columns}
    assert by_name["name"]["source"] == "$.Name" and by_name["name"]["required"] is True
    assert by_name["id"]["required"] is True and "required" not in by_name["bal"]
    assert set(found.left_out) == {"tm", "iv"}  # a time of day, an interval: no declared type
    assert "MicroTime" in found.left_out["tm"] and "MicroDuration" in found.left_out["iv"]
    assert found.fields == frozenset(by_name[c]["source"][2:] for c in by_name) | {"tm", "iv"}


def test_a_table_without_a_key_or_a_schema_block_is_refused_with_the_fix():
    with pytest.raises(SchemaBlockError, match="message.key.columns"):
        shape(None, RECORD["value"]["schema"])
    with pytest.raises(SchemaBlockError, match="schemas.enable=true"):
        _shape_of(None, json.dumps(RECORD["value"]["payload"]).encode())
    with pytest.raises(SchemaBlockError, match="not JSON"):
        _shape_of(None, b"\x00\x00\x00\x00\x01avro")


def test_two_fields_that_would_be_one_column_refuse_the_table():
    value = json.loads(json.dumps(RECORD["value"]["schema"]))
    after = next(f for f in value["fields"] if f["field"] == "after")
    after["fields"].append({"type": "string", "optional": True, "field": "NAME"})
    with pytest.raises(SchemaBlockError, match="both be column 'name'"):
        shape(RECORD["key"]["schema"], value)


def test_a_field_whose_name_is_no_plain_column_name_is_left_out_not_read_as_a_path():
    value = json.loads(json.dumps(RECORD["value"]["schema"]))
    after = next(f for f in value["fields"] if f["field"] == "after")
    after["fields"] += [
        {"type": "string", "optional": True, "field": "a.b"},  # $.a.b would read a nested field
        {"type": "string", "optional": True, "field": "\u212a"},  # KELVIN SIGN: lower() is an ASCII k
    ]
    found = shape(RECORD["key"]["schema"], value)
    assert {"a.b", "\u212a"} <= set(found.left_out) and "k" not in _types(found)


def test_a_column_added_in_the_source_is_added_optional_a_widened_type_widens_and_another_is_a_conflict():
    before = shape(RECORD["key"]["schema"], RECORD["value"]["schema"])
    assert _merge(before, before) == (before, "unchanged")
    more = TableShape(
        before.columns + ({"name": "vip", "type": "boolean", "source": "$.vip", "required": True},),
        before.primary_key,
        before.left_out,
    )
    merged, line = _merge(before, more)
    assert merged.columns[-1] == {"name": "vip", "type": "boolean", "source": "$.vip"}  # optional
    assert "columns added: ['vip']" in line and merged.conflict is None
    # The source's ALTER ... TYPE bigint: a widening (docs/DESIGN.md, "Declarations that evolve"), recorded
    # so the member's tables follow it on its next run.
    widened = TableShape(
        tuple(dict(c, type="bigint") if c["name"] == "sm" else c for c in merged.columns),
        before.primary_key,
        before.left_out,
    )
    recorded, line = _merge(merged, widened)
    assert recorded.columns == widened.columns and recorded.conflict is None
    assert line == "widened: sm from integer to bigint"
    # Anything else that is no widening stays a conflict.
    retyped = TableShape(
        tuple(dict(c, type="integer") if c["name"] == "sm" else c for c in recorded.columns),
        before.primary_key,
        before.left_out,
    )
    refused, line = _merge(recorded, retyped)
    assert refused.columns == recorded.columns  # the recorded shape is kept
    assert refused.conflict == "sm: bigint from $.sm is now integer from $.sm"
    assert line.startswith("refused until a person decides")
    assert TableShape.from_json(refused.as_json()) == refused
    merged = recorded
    dropped = TableShape(merged.columns[:-1], merged.primary_key, merged.left_out)
    kept, line = _merge(merged, dropped)
    assert kept.columns == merged.columns and "no longer in the source (kept): ['vip']" in line


ENTRY = {
    "database": {"topic_prefix": "shop", "schemas": ["public", "sales"]},
    "changes": "debezium",
    "target_schema": "replica",
    "members": {"sales.orders": {"name": "orders_replica", "state_table": "crm.orders"}},
    "max_records_per_partition": 1000,
}


def test_a_database_entry_admits_its_schemas_table_topics_and_names_each_member():
    db = declaration.parse("shop", ENTRY, "pipelines.yml: pipeline 'shop'")
    assert db.table_of("shop.public.customers") == ("public", "customers")
    assert db.table_of("shop.sales.orders") == ("sales", "orders")
    assert db.table_of("shop.hr.people") is None  # a schema the entry does not take
    assert db.table_of("shop.public") is None and db.table_of("shopx.public.a") is None
    assert db.table_of("shop.public.a.b") is None  # not a table topic's shape
    assert db.member_name("public", "customers") == "shop__customers"
    assert db.member_name("inventory", "Stock-Items") == "shop__inventory__stock_items"
    assert db.member_name("sales", "orders") == "orders_replica" and db.names_member("orders_replica")
    customers = shape(RECORD["key"]["schema"], RECORD["value"]["schema"])
    spec = db.member_spec("public", "customers", "shop.public.customers", customers)
    assert spec["topics"] == ["shop.public.customers"] and spec["primary_key"] == ["id"]
    assert (spec["target_table"], spec["state_table"]) == ("replica.customers__changes", "replica.customers")
    assert spec["changes"] == "debezium" and spec["max_records_per_partition"] == 1000
    assert "database" not in spec and "members" not in spec and "target_schema" not in spec
    orders = db.member_spec("sales", "orders", "shop.sales.orders", customers)
    assert (orders["target_table"], orders["state_table"]) == ("replica.sales__orders__changes", "crm.orders")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"changes": "keyed"}, "add changes: debezium"),
        ({"columns": []}, "each table's own"),
        ({"sink": "iceberg"}, "does not take database: yet"),
        ({"target_schema": "eosflow"}, "may not write there"),
        ({"target_schema": None}, "target_schema must be"),
        ({"database": {"topic_prefix": "shop."}}, "without the dot"),
        ({"database": {"topic_prefix": "shop", "tables": ["a;b"]}}, "database.tables must be"),
        ({"database": {"prefix": "shop"}}, "topic_prefix"),
        ({"members": {"orders": {}}}, "is not <schema>.<table>"),
        ({"members": {"public.orders": {"columns": []}}}, "may set"),
    ],
)
def test_a_wrong_database_entry_is_refused_saying_what_to_do(change, says):
    spec = {k: v for k, v in (ENTRY | change).items() if v is not None}
    with pytest.raises(PipelineConfigError, match=says.replace("(", r"\(")):
        declaration.parse("shop", spec, "pipelines.yml: pipeline 'shop'")


@pytest.mark.parametrize("compiled", [True, False])
def test_a_members_change_holding_a_field_its_discovery_never_saw_is_rejected_not_dropped(compiled):
    """A column added in the source after the last discovery: its value would be dropped silently, so the
    record is a rejected row until discovery declares it (and a replay brings it in); a field discovery
    left out (no declared type) is no reason to reject."""
    import dataclasses

    from eosflow.pipelines import _parse
    from eosflow.schema.changes import ChangeCheck

    spec = {
        "topics": ["shop.public.customers"],
        "changes": "debezium",
        "primary_key": ["id"],
        "columns": [{"name": "id", "type": "bigint", "required": True}, {"name": "email", "type": "text"}],
        "target_table": "replica.customers__changes",
        "state_table": "replica.customers",
    }
    schema = _parse("customers", spec, "member customers").schema
    member = dataclasses.replace(schema, image_fields=frozenset({"id", "email", "opened_at"}))
    check = ChangeCheck(member, 65_536, None, compiled=compiled)

    def change(after: dict) -> bytes:
        return json.dumps({"op": "c", "after": after, "source": {"lsn": 10, "ts_ms": 1}}).encode()

    error, typed = check(b'{"id": 1}', change({"id": 1, "email": "a@x", "opened_at": 36000000000}))
    assert error is None and typed[:2] == [1, "a@x"]
    error, typed = check(b'{"id": 2}', change({"id": 2, "email": "b@x", "vip": True}))
    assert (
        typed is None
        and error.startswith("not declared yet: field(s) ['vip']")
        and "eosflow discover" in error
    )
    if compiled:  # the fast path took the first record and left the second to the Python check
        assert check.fast is not None and check.fallbacks == 1
    error, _ = ChangeCheck(schema, 65_536, None, compiled=compiled)(b"", change({"id": 2, "vip": True}))
    assert error is None  # a pipeline declared by hand takes the fields it declares, as any pipeline
