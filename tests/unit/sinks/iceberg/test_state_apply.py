"""The Iceberg state table's apply (eosflow.sinks.iceberg.state), on a real PyIceberg table in a SQL catalog
on sqlite: each key's row is its last change by (LSN, partition, offset), whatever order batches come in;
older changes never win, deletes (hard and soft) and truncates, TOAST placeholders filled, keys moved."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from eosflow.schema.arrow import valid_columns
from eosflow.schema.declaration import parse_schema
from eosflow.sinks.iceberg import catalog, state

SPEC = {
    "columns": [
        {"name": "id", "type": "bigint", "required": True},
        {"name": "email", "type": "text", "required": True},
        {"name": "notes", "type": "text"},
    ],
    "changes": "debezium",
    "primary_key": ["id"],
}
SCHEMA = parse_schema(SPEC, "test")


@pytest.fixture
def lake(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    return cat


def make(lake, soft: bool = False):
    columns = state.columns(SCHEMA, soft)
    return catalog.ensure_table(lake, "lake.state", columns, lambda m: None, SCHEMA.primary_key)


class Batch:
    """Changes as the run's tasks stage them; offsets count up per partition."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.offsets: dict[int, int] = {}

    def add(self, op, id_, email=None, notes=None, lsn=None, partition=0, unchanged=None, old_key=None):
        offset = self.offsets.get(partition, 0)
        self.offsets[partition] = offset + 1
        self.rows.append(
            {
                "id": id_,
                "email": email,
                "notes": notes,
                "change_op": op,
                "change_lsn": lsn,
                "change_ts": datetime(2026, 1, 1, tzinfo=UTC),
                "change_unchanged": None if unchanged is None else "{" + ",".join(unchanged) + "}",
                "change_old_key": None if old_key is None else json.dumps({"id": old_key}),
                "kafka_topic": "t",
                "kafka_partition": partition,
                "kafka_offset": offset,
                "kafka_timestamp": datetime(2026, 1, 2, tzinfo=UTC),
                "batch_id": "b",
            }
        )
        return self

    def table(self) -> pa.Table:
        types = dict(valid_columns(SCHEMA))
        names = [c.name for c in state.declared(SCHEMA)] + list(state.STAGED)
        return pa.Table.from_pylist(self.rows, schema=pa.schema([(n, types[n]) for n in names]))


def apply(lake, batch: Batch, soft: bool = False, batch_id: str = "b1") -> state.Applied:
    table = lake.load_table("lake.state")
    done = state.plan_state(table, batch.table(), SCHEMA, soft, batch_id)
    with table.transaction() as tx:
        if done.deleted is not None:
            tx.delete(done.deleted)
        if done.appended.num_rows:
            tx.append(done.appended)
        if done.properties:
            tx.set_properties(done.properties)
    return done


def rows(lake) -> dict[int, dict]:
    found = lake.load_table("lake.state").scan().to_arrow().to_pylist()
    ids = [r["id"] for r in found]
    assert len(ids) == len(set(ids)), f"a key twice: {sorted(ids)}"
    return {r["id"]: r for r in found}


def test_the_table_is_identified_by_the_primary_key(lake):
    table = make(lake)
    assert [table.schema().find_column_name(i) for i in table.schema().identifier_field_ids] == ["id"]
    assert table.spec().is_unpartitioned()


def test_each_keys_last_change_wins_within_a_batch_by_lsn_not_by_offset(lake):
    make(lake)
    b = Batch().add("c", 1, "a@x", lsn=10).add("u", 1, "a2@x", lsn=30).add("u", 1, "late@x", lsn=20)
    b.add("c", 2, "b@x", lsn=15).add("d", 2, lsn=16).add("c", 3, "c@x", lsn=17, partition=1)
    done = apply(lake, b)
    assert {k: r["email"] for k, r in rows(lake).items()} == {1: "a2@x", 3: "c@x"}
    assert (done.keys, done.applied) == (3, 3)
    assert rows(lake)[1]["change_lsn"] == 30 and rows(lake)[1]["batch_id"] == "b1"


def test_an_older_change_in_a_later_batch_never_overwrites_and_a_deleted_key_stays_deleted(lake):
    make(lake)
    apply(lake, Batch().add("c", 5, "old@x", lsn=10).add("u", 5, "new@x", lsn=20).add("c", 6, "g@x", lsn=30)
          .add("d", 6, lsn=40))  # fmt: skip
    again = Batch().add("c", 5, "old@x", lsn=10).add("c", 6, "g@x", lsn=30)
    done = apply(lake, again)
    assert {k: r["email"] for k, r in rows(lake).items()} == {5: "new@x"}
    assert (done.applied, done.superseded) == (0, 2)
    apply(lake, Batch().add("c", 6, "back@x", lsn=50))  # newer than the delete: back it comes
    assert {k: r["email"] for k, r in rows(lake).items()} == {5: "new@x", 6: "back@x"}
    assert json.loads(lake.load_table("lake.state").properties[state.TOMBSTONES])["keys"] == 0


def test_soft_deletes_keep_the_last_image_marked(lake):
    make(lake, soft=True)
    apply(lake, Batch().add("c", 1, "a@x", "kept", lsn=10), soft=True)
    apply(lake, Batch().add("d", 1, lsn=20).add("c", 2, "b@x", "n", lsn=21).add("d", 2, lsn=22), soft=True)
    found = rows(lake)
    assert (found[1]["email"], found[1]["notes"], found[1]["change_op"]) == ("a@x", "kept", "d")
    assert (found[2]["email"], found[2]["notes"]) == ("b@x", "n")
    assert found[1]["deleted_at"] is not None and found[2]["deleted_at"] is not None


def test_toast_placeholders_are_filled_from_the_held_row_the_batch_and_a_moved_keys_old_row(lake):
    make(lake)
    apply(lake, Batch().add("c", 1, "a@x", "long text", lsn=10))
    b = Batch().add("u", 1, "a2@x", lsn=20, unchanged=["notes"])  # from the held row
    b.add("d", 1, lsn=30).add("c", 7, "a3@x", lsn=30, unchanged=["notes"], old_key=1)  # moved: 1 -> 7
    b.add("u", 7, "a4@x", lsn=40, unchanged=["notes"])  # the moved key updated: from the batch
    done = apply(lake, b)
    assert {k: (r["email"], r["notes"]) for k, r in rows(lake).items()} == {7: ("a4@x", "long text")}
    assert done.rejected.num_rows == 0


def test_a_truncate_empties_what_came_before_it_and_refuses_older_changes_later(lake):
    make(lake)
    apply(lake, Batch().add("c", 1, "a@x", lsn=10).add("c", 2, "b@x", lsn=11))
    b = Batch().add("t", None, lsn=20).add("c", 3, "c@x", lsn=21)
    b.rows[0]["id"] = None
    apply(lake, b)
    assert sorted(rows(lake)) == [3]
    apply(lake, Batch().add("u", 1, "late@x", lsn=15))  # older than the truncate
    assert sorted(rows(lake)) == [3]


def test_a_change_equal_to_the_held_one_is_taken_not_applied(lake):
    make(lake)
    apply(lake, Batch().add("c", 1, "a@x", lsn=10))
    done = apply(lake, Batch().add("c", 1, "a@x", lsn=10))
    assert (done.applied, done.superseded) == (0, 1)
    assert len(lake.load_table("lake.state").scan().to_arrow()) == 1


def test_a_keyed_stream_without_lsn_orders_by_partition_and_offset(lake):
    make(lake)
    apply(lake, Batch().add("u", 1, "a@x").add("u", 1, "b@x"))
    apply(lake, Batch().add("u", 1, "c@x").add("u", 2, "z@x"))  # offsets 0, 1 again: not later
    assert {k: r["email"] for k, r in rows(lake).items()} == {1: "b@x", 2: "z@x"}


def test_a_placeholder_with_nothing_earlier_to_fill_it_is_rejected_and_the_key_stays_as_it_was(lake):
    """The key moved from a row deleted in an earlier batch: no value to take. A NULL for a value the
    source holds would be a wrong row: the change is rejected (its coordinates, REPLICA IDENTITY FULL
    named, as the Kafka sink words it), and so is a later change of the key that would fill from it; a
    change that sends every value still applies."""
    make(lake)
    apply(lake, Batch().add("c", 1, "a@x", "long", lsn=10).add("d", 1, lsn=20))
    b = Batch().add("c", 2, "a@x", lsn=20, unchanged=["notes"], old_key=1)  # the move's halves: one LSN
    b.add("u", 2, "a2@x", lsn=22, unchanged=["notes"])  # would fill from the rejected create
    b.add("u", 3, "c@x", lsn=23, unchanged=["notes"])  # a key that holds no row at all
    done = apply(lake, b)
    assert rows(lake) == {}
    assert done.rejected.select(["kafka_partition", "kafka_offset"]).to_pylist() == [
        {"kafka_partition": 0, "kafka_offset": o} for o in (0, 1, 2)
    ]
    errors = done.rejected["error"].to_pylist()
    assert all("unchanged TOAST column(s) ['notes']" in e for e in errors)
    assert all("Set REPLICA IDENTITY FULL on the source table so Debezium sends them" in e for e in errors)
    assert "moved from key" in errors[0] and "holds no row" in errors[2]
    assert (done.applied, done.superseded) == (0, 0)
    assert "3 change(s) rejected" in done.line()
    done = apply(lake, Batch().add("u", 2, "a3@x", "whole", lsn=30))
    assert {k: (r["email"], r["notes"]) for k, r in rows(lake).items()} == {2: ("a3@x", "whole")}
    assert done.rejected.num_rows == 0


def test_after_a_rejected_change_its_keys_value_is_unknown_to_the_changes_that_follow(lake):
    """Key 1 moved to 2 after run 1 deleted 1's row (its partition ran ahead): the move is rejected, and
    an update of 2 leaving notes out cannot take them from 2's former row, deleted before the move."""
    make(lake)
    apply(lake, Batch().add("c", 1, "a@x", "one", lsn=5, partition=1).add("d", 1, lsn=20, partition=1))
    b = Batch().add("c", 2, "b@x", "two", lsn=10).add("d", 2, lsn=15)
    b.add("c", 2, "a@x", lsn=20, unchanged=["notes"], old_key=1).add(
        "u", 2, "a2@x", lsn=22, unchanged=["notes"]
    )
    done = apply(lake, b)
    assert rows(lake) == {}
    assert done.rejected["kafka_offset"].to_pylist() == [2, 3]


def test_a_key_moved_from_a_partition_that_is_behind_is_rejected_not_filled_with_a_stale_value(lake):
    """Key 1 lives in partition 1, key 2 in partition 0. Partition 0 delivered the move's create (1 -> 2)
    while partition 1 has not delivered key 1's last update nor the move's delete (a catch-up takes each
    partition's range on its own): the row the table holds for key 1 may be older than the moved row, so
    its value is not taken. Once partition 1 catches up, key 1 is gone and key 2 was never given a NULL or
    a stale value."""
    make(lake)
    apply(lake, Batch().add("c", 1, "a@x", "one", lsn=5, partition=1))
    done = apply(lake, Batch().add("c", 2, "a@x", lsn=20, unchanged=["notes"], old_key=1))
    assert done.rejected["kafka_offset"].to_pylist() == [0]
    assert "has not delivered" in done.rejected["error"][0].as_py()
    later = Batch().add("u", 1, "a@x", "newer", lsn=10, partition=1).add("d", 1, lsn=20, partition=1)
    later.rows[0]["kafka_offset"], later.rows[1]["kafka_offset"] = 1, 2
    apply(lake, later)
    assert rows(lake) == {}


def test_a_move_whose_delete_half_comes_later_in_the_batch_by_partition_still_fills(lake):
    """Debezium sends both halves of a primary-key update at one LSN; by (LSN, partition, offset) the
    create in partition 0 sorts before the delete in partition 1."""
    make(lake)
    apply(lake, Batch().add("c", 1, "a@x", "one", lsn=5, partition=1))
    b = Batch().add("c", 2, "a@x", lsn=20, unchanged=["notes"], old_key=1)
    b.add("d", 1, lsn=20, partition=1)
    b.rows[1]["kafka_offset"] = 1
    done = apply(lake, b)
    assert done.rejected.num_rows == 0
    assert {k: (r["email"], r["notes"]) for k, r in rows(lake).items()} == {2: ("a@x", "one")}


def test_an_unfillable_change_older_than_what_its_key_holds_is_superseded_not_rejected(lake):
    """Not applied either way: older than the key's row, its tombstone or the latest truncate, it is
    taken and counted as any older change."""
    make(lake)
    apply(lake, Batch().add("c", 1, "a@x", "n", lsn=50).add("c", 2, "b@x", lsn=50).add("d", 2, lsn=60))
    b = Batch().add("u", 1, "old@x", lsn=40, unchanged=["notes"]).add("u", 2, "old@x", lsn=40,
                                                                     unchanged=["notes"])  # fmt: skip
    done = apply(lake, b)
    assert (done.rejected.num_rows, done.superseded) == (0, 2)
    t = Batch().add("t", None, lsn=70)
    t.rows[0]["id"] = None
    apply(lake, t)
    done = apply(lake, Batch().add("u", 3, "c@x", lsn=65, unchanged=["notes"]))
    assert (done.rejected.num_rows, done.superseded) == (0, 1)


def test_a_moved_key_takes_its_values_from_the_old_keys_row_never_from_the_new_keys_former_row(lake):
    """Key 2 was deleted and key 1 then moved to 2: its TOAST value is key 1's, although key 2's former
    row is later than key 1's last change."""
    make(lake)
    apply(lake, Batch().add("c", 1, "a@x", "one", lsn=10).add("c", 2, "b@x", "two", lsn=20))
    b = Batch().add("d", 2, lsn=30).add("d", 1, lsn=40)
    b.add("c", 2, "a@x", lsn=40, unchanged=["notes"], old_key=1)
    apply(lake, b)
    assert {k: (r["email"], r["notes"]) for k, r in rows(lake).items()} == {2: ("a@x", "one")}


def test_a_soft_deletes_marked_row_is_no_source_for_a_key_moved_in_a_later_run(lake):
    """Key 1 was first read by its delete (the move's first half, which split from its create by a run's
    end): the marked row holds the delete's own image, notes NULL, which cannot be told from a row whose
    notes are NULL. The move is rejected, as with hard deletes, never given that NULL."""
    make(lake, soft=True)
    apply(lake, Batch().add("d", 1, lsn=40), soft=True)
    done = apply(lake, Batch().add("c", 2, "a@x", lsn=40, unchanged=["notes"], old_key=1), soft=True)
    assert 2 not in rows(lake)
    assert "whose row as it moved is not in the table" in done.rejected["error"][0].as_py()


COMPOSITE = parse_schema(
    {
        "columns": [
            {"name": "region", "type": "text", "required": True},
            {"name": "id", "type": "bigint", "required": True},
            {"name": "email", "type": "text", "required": True},
        ],
        "changes": "debezium",
        "primary_key": ["region", "id"],
    },
    "test",
)


def test_a_composite_primary_key_finds_and_replaces_its_rows(lake):
    table = catalog.ensure_table(
        lake, "lake.composite", state.columns(COMPOSITE, False), lambda m: None, COMPOSITE.primary_key
    )
    assert [table.schema().find_column_name(i) for i in table.schema().identifier_field_ids] == [
        "region",
        "id",
    ]

    def batch(changes: list[tuple]) -> pa.Table:
        b = Batch()
        for op, region, id_, email, lsn in changes:
            b.add(op, id_, email, lsn=lsn)
            b.rows[-1]["region"] = region
            del b.rows[-1]["notes"]
        types = dict(valid_columns(COMPOSITE))
        names = [c.name for c in state.declared(COMPOSITE)] + list(state.STAGED)
        return pa.Table.from_pylist(b.rows, schema=pa.schema([(n, types[n]) for n in names]))

    def apply_to(changes):
        t = lake.load_table("lake.composite")
        done = state.plan_state(t, batch(changes), COMPOSITE, False, "b")
        with t.transaction() as tx:
            if done.deleted is not None:
                tx.delete(done.deleted)
            if done.appended.num_rows:
                tx.append(done.appended)
            tx.set_properties(done.properties or {"x": "1"})
        found = lake.load_table("lake.composite").scan().to_arrow().to_pylist()
        return sorted((r["region"], r["id"], r["email"]) for r in found)

    apply_to([("c", "eu", 1, "a", 10), ("c", "us", 1, "b", 11), ("c", "eu", 2, "c", 12)])
    assert apply_to([("u", "us", 1, "b2", 20), ("d", "eu", 2, None, 21), ("u", "eu", 1, "old", 5)]) == [
        ("eu", 1, "a"),
        ("us", 1, "b2"),
    ]


@pytest.mark.parametrize(
    ("declared", "keys"),
    [
        ("text", ["a", "b", "c"]),
        ("uuid", ["00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b",
                  "00000000-0000-0000-0000-00000000000c"]),
        ("numeric(10,2)", [Decimal("1.10"), Decimal("2.20"), Decimal("3.30")]),
        ("timestamptz", [datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 3)]),
        ("date", [date(2026, 1, d) for d in (1, 2, 3)]),
        ("integer", [1, 2, 3]),
    ],
)  # fmt: skip
def test_every_key_type_finds_and_replaces_its_rows(lake, declared, keys):
    schema = parse_schema(
        {
            "columns": [
                {"name": "k", "type": declared, "required": True},
                {"name": "email", "type": "text", "required": True},
            ],
            "changes": "debezium",
            "primary_key": ["k"],
        },
        "test",
    )
    catalog.ensure_table(lake, "lake.typed", state.columns(schema, False), lambda m: None, ("k",))
    types = dict(valid_columns(schema))
    names = [c.name for c in state.declared(schema)] + list(state.STAGED)

    def apply_to(changes: list[tuple]) -> dict:
        b = Batch()
        for op, k, email, lsn in changes:
            b.add(op, 0, email, lsn=lsn)
            b.rows[-1]["k"] = k
        t = lake.load_table("lake.typed")
        staged = pa.Table.from_pylist(b.rows, schema=pa.schema([(n, types[n]) for n in names]))
        done = state.plan_state(t, staged, schema, False, "b")
        with t.transaction() as tx:
            if done.deleted is not None:
                tx.delete(done.deleted)
            if done.appended.num_rows:
                tx.append(done.appended)
            tx.set_properties(done.properties or {"x": "1"})
        return {r["k"]: r["email"] for r in lake.load_table("lake.typed").scan().to_arrow().to_pylist()}

    a, b, c = keys
    apply_to([("c", a, "a", 10), ("c", b, "b", 11), ("c", c, "c", 12)])
    assert apply_to([("u", a, "a2", 20), ("d", b, None, 21), ("c", b, "old", 5)]) == {a: "a2", c: "c"}


def test_deletes_is_a_change_streams_and_hard_or_soft():
    from eosflow.errors import PipelineConfigError
    from eosflow.sinks.iceberg.sink import IcebergSink

    assert IcebergSink.keeps_state
    assert IcebergSink.declare({"table": "lake.s", "deletes": "soft"}, SCHEMA, "p").deletes == "soft"
    assert IcebergSink.declare({"table": "lake.s"}, SCHEMA, "p").deletes == "hard"
    with pytest.raises(PipelineConfigError, match="must be hard .* or soft"):
        IcebergSink.declare({"table": "lake.s", "deletes": "gone"}, SCHEMA, "p")
    appending = parse_schema({"columns": SPEC["columns"]}, "p")
    with pytest.raises(PipelineConfigError, match="add changes: debezium"):
        IcebergSink.declare({"table": "lake.s", "deletes": "soft"}, appending, "p")


def test_a_truncate_with_soft_deletes_marks_what_came_before_it_and_keeps_an_earlier_mark(lake):
    make(lake, soft=True)
    apply(lake, Batch().add("c", 1, "a@x", lsn=10).add("c", 2, "b@x", lsn=11).add("d", 2, lsn=12), soft=True)
    marked = rows(lake)[2]["deleted_at"]
    b = Batch().add("c", 3, "c@x", lsn=30).add("t", None, lsn=20).add("u", 1, "late@x", lsn=15)
    b.rows[1]["id"] = None
    apply(lake, b, soft=True)
    found = rows(lake)
    assert sorted(found) == [1, 2, 3]
    assert (found[1]["email"], found[1]["deleted_at"] is not None) == ("a@x", True)  # older than the truncate
    assert found[2]["deleted_at"] == marked  # its own delete's time kept
    assert (found[3]["email"], found[3]["deleted_at"]) == ("c@x", None)  # after the truncate


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("soft", [False, True])
def test_random_changes_in_random_batches_leave_each_keys_last_change(lake, seed, soft):
    """A model written apart from the apply: over every change so far, each key's last by (LSN, partition,
    offset), gone if it is a delete (soft: marked) or older than the latest truncate. Changes come in
    random batches, some re-delivered later with their old LSNs, in two partitions."""
    import random

    rng = random.Random(seed)
    make(lake, soft=soft)
    changes: list[tuple] = []  # (op, id, email, lsn, partition)
    lsn = 100
    for _ in range(60):
        lsn += rng.randint(1, 3)
        if rng.random() < 0.05:
            changes.append(("t", None, None, lsn, 0))
            continue
        id_ = rng.randint(1, 8)
        op = rng.choice(["c", "u", "u", "d"])
        changes.append((op, id_, None if op == "d" else f"{id_}-{lsn}", lsn, id_ % 2))
    redelivered = rng.sample(changes, 10)
    stream = changes + redelivered  # re-deliveries arrive later, older by their LSN
    offsets = {0: 0, 1: 0}
    placed = []
    for op, id_, email, at, partition in stream:
        placed.append((op, id_, email, at, partition, offsets[partition]))
        offsets[partition] += 1
    committed: list[tuple] = []
    i = 0
    while i < len(placed):
        n = rng.randint(1, 15)
        b = Batch()
        for op, id_, email, at, partition, offset in placed[i : i + n]:
            b.add(op, id_, email, lsn=at, partition=partition)
            b.rows[-1]["kafka_offset"] = offset
        apply(lake, b, soft=soft)
        committed += placed[i : i + n]
        i += n
        truncates = [(at, p, o) for op, _, _, at, p, o in committed if op == "t"]
        cut = max(truncates) if truncates else None
        last: dict[int, tuple] = {}
        for op, id_, email, at, p, o in committed:
            if op != "t" and (id_ not in last or (at, p, o) > last[id_][1]):
                last[id_] = (op, (at, p, o), email)
        live = {k: v[2] for k, v in last.items() if v[0] != "d" and (cut is None or v[1] > cut)}
        found = rows(lake)
        assert {k: r["email"] for k, r in found.items() if r.get("deleted_at") is None} == live, (seed, i)
        if soft:
            assert set(found) - set(live) == {k for k in found if found[k]["deleted_at"] is not None}
        else:
            assert set(found) == set(live)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("soft", [False, True])
def test_random_toast_placeholders_and_moved_keys_never_leave_a_wrong_value(lake, seed, soft):
    """A source table simulated (keys 1..6, each live row's email and notes): creates send every value,
    updates send notes or leave them out (Debezium's TOAST placeholder), a primary-key update is a delete
    of the old key and a create of the new one naming it, at one LSN, notes left out, and a few
    truncates; in two partitions by key, each batch taking a random number of each partition's next
    changes (as catch-ups do: one partition runs ahead). The model, written apart from the apply: a change
    leaving notes out is rejected exactly when the key it takes them from has neither a row in the table
    before the batch nor a change earlier in the batch that was not rejected (a rejected change leaves
    its key's value unknown), or, for a move, when the move's delete is not in the batch; unless a
    truncate it is older than makes it one not applied anyway. Every row the table holds carries the
    source's values at its change, and each key's row is its last change among those not rejected."""
    import random

    rng = random.Random(seed)
    make(lake, soft=soft)
    truth: dict[int, tuple[str, str]] = {}  # the source table: live key -> (email, notes)
    stream: list[dict] = []  # op, id, email, notes, lsn, unchanged, old_key, truth
    lsn = 100

    def emit(op, id_, email=None, notes=None, unchanged=False, old_key=None):
        stream.append({"op": op, "id": id_, "email": email, "notes": None if unchanged else notes,
                       "lsn": lsn, "unchanged": unchanged, "old_key": old_key,
                       "truth": None if op in "dt" else (email, notes)})  # fmt: skip

    for _ in range(60):
        lsn += rng.randint(2, 4)
        live, dead = sorted(truth), [k for k in range(1, 7) if k not in truth]
        draw = rng.random()
        if draw < 0.03:
            emit("t", None)
            truth.clear()
        elif dead and (not live or draw < 0.3):
            k = rng.choice(dead)
            truth[k] = (f"{k}-{lsn}", f"n{lsn}")
            emit("c", k, *truth[k])
        elif live and draw < 0.42:
            k = rng.choice(live)
            del truth[k]
            emit("d", k)
        elif live and dead and draw < 0.6:
            old, new = rng.choice(live), rng.choice(dead)
            emit("d", old)
            truth[new] = truth.pop(old)
            emit("c", new, *truth[new], unchanged=True, old_key=old)
            stream[-1]["twin"] = stream[-2]  # the move's delete half
        elif live:
            k = rng.choice(live)
            keep = rng.random() < 0.6
            truth[k] = (f"{k}-{lsn}", truth[k][1] if keep else f"n{lsn}")
            emit("u", k, *truth[k], unchanged=keep)
    queues: dict[int, list[dict]] = {0: [], 1: []}
    for change in stream:
        change["partition"] = 0 if change["id"] is None else change["id"] % 2
        change["offset"] = len(queues[change["partition"]])
        queues[change["partition"]].append(change)
    at = {(c["partition"], c["offset"]): c for c in stream}
    committed: list[dict] = []
    rejected_so_far: set[tuple[int, int]] = set()
    while queues[0] or queues[1]:
        chunk = []
        while not chunk:
            for p in (0, 1):
                n = rng.randint(0, 6)
                chunk += queues[p][:n]
                del queues[p][:n]
        chunk.sort(key=lambda c: (c["lsn"], c["partition"], c["offset"]))
        this_batch = {id(c) for c in chunk}
        before = rows(lake)
        known = {k for k, r in before.items() if r.get("deleted_at") is None}  # what the table held
        expected_rejected = set()
        cut = max((c["lsn"] for c in committed + chunk if c["op"] == "t"), default=0)
        for c in chunk:
            if c["op"] not in ("c", "u"):
                continue
            if c["unchanged"] and c["lsn"] < cut:  # older than a truncate: not applied, not rejected
                continue
            if c["old_key"] is None:
                at_hand = c["id"] in known
            elif id(c["twin"]) in this_batch:  # the old key's row as the move found it
                at_hand = c["old_key"] in known
            else:  # the move's delete committed before (its row gone, or marked with an image not to be
                # trusted) or not read yet (what the table holds may be older than what moved)
                at_hand = False
            if c["unchanged"] and not at_hand:
                expected_rejected.add((c["partition"], c["offset"]))
                known.discard(c["id"])
            else:
                known.add(c["id"])
        b = Batch()
        for c in chunk:
            b.add(c["op"], c["id"], c["email"], c["notes"], lsn=c["lsn"], partition=c["partition"],
                  unchanged=["notes"] if c["unchanged"] else None, old_key=c["old_key"])  # fmt: skip
            b.rows[-1]["kafka_offset"] = c["offset"]
        done = apply(lake, b, soft=soft)
        got = {(r["kafka_partition"], r["kafka_offset"]) for r in done.rejected.to_pylist()}
        assert got == expected_rejected, (seed, len(committed))
        rejected_so_far |= got
        committed += chunk
        found = rows(lake)
        for k, row in found.items():  # every row holds the source's values at its change
            change = at[(row["kafka_partition"], row["kafka_offset"])]
            if change["truth"] is not None:
                assert (row["email"], row["notes"]) == change["truth"], (seed, len(committed), k)
        cut = max((c["lsn"] for c in committed if c["op"] == "t"), default=None)
        last: dict[int, dict] = {}
        for c in committed:
            if c["op"] == "t" or (c["partition"], c["offset"]) in rejected_so_far:
                continue
            if c["id"] not in last or c["lsn"] > last[c["id"]]["lsn"]:
                last[c["id"]] = c
        live = {k for k, c in last.items() if c["op"] != "d" and (cut is None or c["lsn"] > cut)}
        assert {k for k, r in found.items() if r.get("deleted_at") is None} == live, (seed, len(committed))
        for k in live:
            assert found[k]["change_lsn"] == last[k]["lsn"], (seed, len(committed), k)


def test_verify_says_where_the_counts_do_not_add_up():
    from eosflow.sinks.iceberg.verify_state import _counts

    assert _counts(5, 4, 1, 1) == []
    assert _counts(5, 5, 1, 0) == [
        {"ledger": "5 read, 5 written + 1 rejected"},
        {"rejected": "the ledger counts 1, eosflow.rejected holds 0"},
    ]
