"""A change stream's records read as changes (docs/DESIGN.md, "Change streams"): Debezium's envelope with and
without its schema block, Debezium's value forms, the TOAST placeholder, tombstones, truncates, keyed topics,
and every record that is not a change rejected with its reason."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from eosflow.errors import PipelineConfigError
from eosflow.pipelines import _parse
from eosflow.schema.changes import PLACEHOLDER, ChangeCheck

COLUMNS = [
    {"name": "id", "type": "bigint", "required": True},
    {"name": "email", "type": "text", "required": True},
    {"name": "balance", "type": "numeric(12,2)"},
    {"name": "profile", "type": "jsonb"},
    {"name": "born", "type": "date"},
    {"name": "seen", "type": "timestamptz"},
    {"name": "tags", "type": "text[]"},
]


def _check(changes: str = "debezium", key: list[str] | None = None) -> ChangeCheck:
    spec = {
        "topics": ["shop.public.customers"],
        "changes": changes,
        "primary_key": key or ["id"],
        "columns": COLUMNS,
        "target_table": "replica.customers_log",
        "state_table": "replica.customers",
    }
    return ChangeCheck(_parse("customers", spec, "pipeline customers").schema, 65_536, None)


def _envelope(op: str, before=None, after=None, lsn=24023128, schema_block=False) -> bytes:
    payload = {"op": op, "before": before, "after": after, "source": {"lsn": lsn, "ts_ms": 1764151200000}}
    doc = {"schema": {"type": "struct", "fields": []}, "payload": payload} if schema_block else payload
    return json.dumps(doc).encode()


ROW = {
    "id": 7,
    "email": "a@example.com",
    "balance": "12.50",  # decimal.handling.mode=string
    "profile": '{"tier": "gold", "score": 1.5}',  # io.debezium.data.Json
    "born": 19000,  # io.debezium.time.Date: days since 1970
    "seen": 1764151200123456,  # MicroTimestamp
    "tags": ["a", "b"],
}


@pytest.mark.parametrize("schema_block", [False, True])
def test_an_insert_reads_debeziums_value_forms_as_the_declared_types(schema_block) -> None:
    error, typed = _check()(b'{"id": 7}', _envelope("c", after=ROW, schema_block=schema_block))
    assert error is None
    (id_, email, balance, profile, born, seen, tags, op, lsn, ts, unchanged, old_key) = typed
    assert (id_, email, balance, tags) == (7, "a@example.com", Decimal("12.50"), ["a", "b"])
    assert profile == {"tier": "gold", "score": Decimal("1.5")}
    assert born == date(2022, 1, 8) and seen == datetime(2025, 11, 26, 10, 0, 0, 123456, tzinfo=UTC)
    assert (op, lsn, unchanged, old_key) == ("c", 24023128, None, None)
    assert ts == datetime(2025, 11, 26, 10, 0, tzinfo=UTC)


def test_a_delete_needs_only_the_key_in_before_and_its_tombstone_changes_nothing() -> None:
    check = _check()
    error, typed = check(b'{"id": 7}', _envelope("d", before={"id": 7}))
    assert error is None and typed[0] == 7 and typed[1] is None and typed[7] == "d"
    error, tombstone = check(b'{"schema": {}, "payload": {"id": 7}}', None)
    assert error is None and tombstone[0] == 7 and tombstone[7:] == ["-", None, None, None, None]


def test_a_toasted_column_an_update_left_unchanged_is_listed_not_stored() -> None:
    after = {**ROW, "email": PLACEHOLDER, "tags": [PLACEHOLDER]}
    error, typed = _check()(None, _envelope("u", before=None, after=after))
    assert error is None and typed[1] is None and typed[6] is None
    assert typed[7] == "u" and typed[10] == ["email", "tags"]


def test_a_truncate_has_no_image() -> None:
    error, typed = _check()(None, _envelope("t"))
    assert error is None and typed[:7] == [None] * 7 and typed[7:9] == ["t", 24023128]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (json.dumps({"before": None, "after": ROW}), "not a Debezium change: no op"),
        (json.dumps({"op": "x", "after": ROW}), "op 'x' is none of c, r, u, d, t"),
        (json.dumps({"op": "u", "before": ROW}), "op u without after"),
        (json.dumps({"op": "d", "after": ROW}), "op d without before"),
        (json.dumps({"op": "c", "after": {**ROW, "id": None}}), "primary key column id is missing or null"),
        (json.dumps({"op": "c", "after": {**ROW, "email": None}}), "email"),
        (json.dumps({"op": "c", "after": {**ROW, "balance": "lots"}}), "balance"),
        (
            json.dumps({"op": "c", "after": ROW, "source": {"lsn": "12"}}),
            "source.lsn '12' is not a WAL position",
        ),
        ("[1, 2]", "not JSON"),
    ],
)
def test_what_is_not_a_change_is_rejected_with_its_reason(value, reason) -> None:
    error, typed = _check()(None, value.encode())
    assert typed is None and reason in error


def test_a_keyed_topic_takes_the_key_as_the_primary_key_and_a_null_value_as_a_delete() -> None:
    check = _check("keyed")
    error, typed = check(b"7", json.dumps({"email": "b@example.com", "id": 99}).encode())
    assert error is None and typed[:2] == [7, "b@example.com"] and typed[7] == "u"  # the key wins
    error, typed = check(b"7", None)
    assert error is None and typed[0] == 7 and typed[7] == "d"
    assert check(None, b"{}")[0] == "not a change of a row: a keyed change stream's record has no key"
    assert "is not a bigint" in check(b"seven", b"{}")[0]


def test_a_keyed_topic_of_a_two_column_key_reads_a_json_object() -> None:
    check = _check("keyed", key=["id", "email"])
    error, typed = check(b'{"id": 7, "email": "c@example.com"}', b'{"balance": 1}')
    assert error is None and typed[:3] == [7, "c@example.com", Decimal("1")]
    assert "not a JSON object of ['id', 'email']" in check(b"7", b"{}")[0]


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"primary_key": ["id"]}, "primary_key names a change stream's key"),
        ({"changes": "maxwell", "primary_key": ["id"]}, "changes 'maxwell' unknown"),
        ({"changes": "debezium"}, "needs primary_key"),
        ({"changes": "debezium", "primary_key": ["nope"]}, "primary_key column 'nope' is not declared"),
        ({"changes": "debezium", "primary_key": ["balance"]}, "must be a required scalar column"),
        ({"changes": "debezium", "primary_key": ["id"], "format": "protobuf"}, "reads format json or avro"),
    ],
)
def test_a_change_stream_declaration_that_cannot_work_is_refused(changes, why) -> None:
    spec = {"topics": ["t"], "columns": COLUMNS, "target_table": "replica.log", **changes}
    with pytest.raises(PipelineConfigError, match=why):
        _parse("p", spec, "pipeline p")


def test_a_create_after_a_key_update_names_the_old_key_whose_history_holds_its_toasted_columns() -> None:
    """Debezium moves a row whose key changed as a delete of the old key and a create of the new one, the
    old key in the create's header __debezium.oldkey; a TOASTed column the update left unchanged is the
    placeholder in the create, and its value is in the old key's history."""
    after = {**ROW, "id": 40, "tags": [PLACEHOLDER]}
    headers = json.dumps([{"key": "__debezium.oldkey", "value": '{"schema": {}, "payload": {"id": 4}}'}])
    error, typed = _check()(b'{"id": 40}', _envelope("c", after=after), headers)
    assert error is None and typed[0] == 40 and typed[10] == ["tags"] and typed[11] == {"id": 4}
    error, typed = _check()(b'{"id": 40}', _envelope("c", after=ROW), headers)
    assert typed[11] is None  # nothing left unchanged: the old key is not needed
