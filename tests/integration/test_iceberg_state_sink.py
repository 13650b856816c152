"""A change stream into an Iceberg table that is the state (docs/DESIGN.md, "State in Iceberg"), against the
real broker, Spark, Postgres and a catalog: Debezium's envelopes as its JSON converter writes them, produced
with confluent-kafka; the table read back with PyIceberg's scan (a reader that is not eosflow's write path).
One row per key, its last change by the source's LSN, whatever order runs, retries and re-deliveries come in.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from eosflow.schema.changes import PLACEHOLDER as PLACEHOLDER_TEXT
from eosflow.sinks.iceberg.config import PROPERTIES_ENV
from eosflow.verify import verify_pipeline
from tests.integration.lakes import LAKES, lake_properties
from tests.integration.test_change_streams import COLUMNS, Source

pytestmark = pytest.mark.integration
# The catalog's commit and the store's files differ by lake; each test here takes a few seconds on each.
every_lake = pytest.mark.parametrize("lake", LAKES, indirect=True)
STATE_CHECKS = (
    "state_keys_unique",
    "state_coordinates_committed",
    "state_holds_last_changes",
    "state_holds_no_deleted_key",
    "state_counts_add_up",
)


@pytest.fixture(autouse=True)
def lake(request, running_stack, monkeypatch) -> str:
    """Where the test's table lives (tests/integration/lakes.py): `sql` unless a test asks for another."""
    kind = getattr(request, "param", "sql")
    properties = lake_properties(running_stack, kind, request.node.name)
    if properties is None:
        monkeypatch.delenv(PROPERTIES_ENV, raising=False)
    else:
        monkeypatch.setenv(PROPERTIES_ENV, json.dumps(properties))
    return kind


def as_iceberg_state(case, **extra) -> str:
    """The case's pipeline as a change stream whose Iceberg table lake.<name> is the state."""
    case.spec.pop("target_table", None)
    case.spec.pop("business_key", None)
    table = f"lake.{case.name}"
    declared = {
        "sink": "iceberg",
        "table": table,
        "columns": COLUMNS,
        "changes": "debezium",
        "primary_key": ["id"],
    }
    case.write_config(**(declared | extra))
    return table


def scan(case, table: str) -> list[dict]:
    from eosflow.sinks.iceberg.catalog import catalog

    return catalog(case.settings).load_table(table).scan().to_arrow().to_pylist()


def state_of(case, table: str) -> dict[int, tuple]:
    """Each key's row as PyIceberg reads it; a key twice fails here."""
    rows = scan(case, table)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"a key twice in {table}: {sorted(ids)}"
    return {r["id"]: (r["email"], r["balance"], r["notes"]) for r in rows}


def verified(case) -> None:
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
    assert {c.name for c in result.checks} == set(STATE_CHECKS)
    assert result.table().splitlines()[0].endswith(f"pipeline {case.name}: ok")


@every_lake
def test_changes_leave_one_row_per_key_its_last_change_and_a_rerun_changes_nothing(case, lake):
    table = as_iceberg_state(case)
    src = Source(case)
    src.send("r", {"id": 1, "email": "a@x", "balance": "1.00", "notes": "snap"})
    src.send("c", {"id": 2, "email": "b@x", "balance": "2.00", "notes": "long text"}, schema=True)
    src.send("c", {"id": 3, "email": "c@x", "balance": None, "notes": None})
    src.send("u", {"id": 1, "email": "a2@x", "balance": "1.50", "notes": "snap"})
    src.send("d", {"id": 3, "email": None, "balance": None, "notes": None})
    src.producer.produce(case.topic, key=b'{"id": 4}', value=b'{"op": "z", "after": {"id": 4}}', partition=0)
    src.flush()
    summary = case.ingest()
    assert summary.outcome == "committed"
    assert state_of(case, table) == {
        1: ("a2@x", Decimal("1.50"), "snap"),
        2: ("b@x", Decimal("2.00"), "long text"),
    }
    rows = {r["id"]: r for r in scan(case, table)}
    assert rows[1]["change_op"] == "u" and rows[1]["change_lsn"] is not None
    assert [r[2] for r in case.rejected()] == ["not a Debezium change: op 'z' is none of c, r, u, d, t"]
    assert case.ingest().records_read == 0
    src.send("u", {"id": 2, "email": "b2@x", "balance": "2.50", "notes": "long text"})
    src.send("c", {"id": 3, "email": "back@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, table) == {
        1: ("a2@x", Decimal("1.50"), "snap"),
        2: ("b2@x", Decimal("2.50"), "long text"),
        3: ("back@x", None, None),
    }
    verified(case)


@every_lake
def test_a_redelivered_older_change_in_a_later_run_never_overwrites_nor_brings_a_deleted_key_back(case):
    table = as_iceberg_state(case)
    src = Source(case)
    old = src.send("c", {"id": 5, "email": "old@x", "balance": "5.00", "notes": None})
    src.send("u", {"id": 5, "email": "new@x", "balance": "6.00", "notes": None})
    deleted = src.send("c", {"id": 6, "email": "gone@x", "balance": None, "notes": None})
    src.send("d", {"id": 6, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    src.send("c", {"id": 5, "email": "old@x", "balance": "5.00", "notes": None}, lsn=old)
    src.send("c", {"id": 6, "email": "gone@x", "balance": None, "notes": None}, lsn=deleted)
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, table) == {5: ("new@x", Decimal("6.00"), None)}
    verified(case)


def test_a_key_a_decimal_and_an_arrays_element_widened_apply_and_a_deleted_key_stays_deleted(case):
    """Iceberg's own promotion of the state table's identifier field (int to long) and a decimal's
    precision (an array is its text there: a wider element changes nothing); the hard-deleted keys, stored
    before under the old key type, still keep an older re-delivered create of a deleted key out."""
    narrow = [
        {"name": "id", "type": "integer", "required": True},
        {"name": "email", "type": "text", "required": True},
        {"name": "balance", "type": "numeric(8,2)"},
        {"name": "tags", "type": "integer[]"},
    ]
    table = as_iceberg_state(case, columns=narrow)
    src = Source(case)
    src.send("c", {"id": 1, "email": "a@x", "balance": "123456.78", "tags": [1, 2]})
    deleted = src.send("c", {"id": 2, "email": "gone@x", "balance": None, "tags": None})
    src.send("d", {"id": 2, "email": None, "balance": None, "tags": None})
    src.flush()
    assert case.ingest().outcome == "committed"

    wider = {"id": "bigint", "balance": "numeric(14,2)", "tags": "bigint[]"}
    as_iceberg_state(case, columns=[{**c, "type": wider.get(c["name"], c["type"])} for c in narrow])
    big = 2**40
    src.send("c", {"id": big, "email": "big@x", "balance": "123456789012.34", "tags": [big]})
    src.send("u", {"id": 1, "email": "a2@x", "balance": "123456.78", "tags": [1, 2]})
    src.send("c", {"id": 2, "email": "gone@x", "balance": None, "tags": None}, lsn=deleted)  # re-delivered
    src.flush()
    assert case.ingest().outcome == "committed"
    from eosflow.sinks.iceberg.catalog import catalog

    fields = {f.name: str(f.field_type) for f in catalog(case.settings).load_table(table).schema().fields}
    assert (fields["id"], fields["balance"], fields["tags"]) == ("long", "decimal(14, 2)", "string")
    rows = {r["id"]: (r["email"], r["balance"], r["tags"]) for r in scan(case, table)}
    assert rows == {
        1: ("a2@x", Decimal("123456.78"), "{1,2}"),
        big: ("big@x", Decimal("123456789012.34"), f"{{{big}}}"),
    }
    verified(case)


def test_soft_deletes_keep_the_row_marked_with_its_last_image(case):
    table = as_iceberg_state(case, deletes="soft")
    src = Source(case)
    src.send("c", {"id": 1, "email": "a@x", "balance": None, "notes": "kept"})
    src.flush()
    assert case.ingest().outcome == "committed"
    src.send("d", {"id": 1, "email": None, "balance": None, "notes": None})
    src.send("c", {"id": 2, "email": "b@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    rows = {r["id"]: r for r in scan(case, table)}
    assert (rows[1]["email"], rows[1]["notes"], rows[1]["change_op"]) == ("a@x", "kept", "d")
    assert rows[1]["deleted_at"] is not None and rows[2]["deleted_at"] is None
    verified(case)


def test_a_toast_placeholder_takes_the_previous_runs_value_and_a_key_update_moves_the_row(case):
    from eosflow.schema.changes import OLD_KEY_HEADER, PLACEHOLDER

    table = as_iceberg_state(case)
    src = Source(case, partitions=1)
    src.send("c", {"id": 10, "email": "a@x", "balance": None, "notes": "long text"})
    src.send("c", {"id": 11, "email": "b@x", "balance": None, "notes": "other text"})
    src.flush()
    assert case.ingest().outcome == "committed"
    src.send("u", {"id": 11, "email": "b2@x", "balance": "1.00", "notes": PLACEHOLDER})
    # id 10 becomes 20 (Debezium: a delete of the old key, its tombstone, a create naming the old key, both
    # halves at the update's one LSN)
    src.send("d", {"id": 10, "email": None, "balance": None, "notes": None})
    moved = {"op": "c", "before": None, "after": {"id": 20, "email": "a@x", "balance": None,
             "notes": PLACEHOLDER}, "source": {"lsn": src.lsn, "ts_ms": 1}}  # fmt: skip
    src.producer.produce(case.topic, key=b'{"id": 20}', value=json.dumps(moved).encode(), partition=0,
                         headers=[(OLD_KEY_HEADER, b'{"id": 10}')])  # fmt: skip
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, table) == {
        11: ("b2@x", Decimal("1.00"), "other text"),
        20: ("a@x", None, "long text"),
    }
    verified(case)


def test_a_key_moved_from_a_row_an_earlier_run_deleted_is_rejected_naming_replica_identity_full(case):
    """About 10 s. A primary-key update (10 -> 20) split by a run's end: run 1 commits its delete half, so
    run 2's create, its notes left out (TOAST), has no row to take them from. The create is rejected (its
    coordinates and bytes, REPLICA IDENTITY FULL named, as the Kafka sink words it) in the same commit as
    the rest of the run, key 20 gets no row with a NULL the source does not hold, the ledger counts every
    record read as written or rejected, and verify passes (a rejected change is no key's last)."""
    from eosflow.schema.changes import OLD_KEY_HEADER, PLACEHOLDER

    table = as_iceberg_state(case)
    src = Source(case, partitions=1)
    src.send("c", {"id": 10, "email": "a@x", "balance": None, "notes": "long text"})
    moved_at = src.send("d", {"id": 10, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    # Debezium sends both halves of the update at its one LSN.
    moved = {"op": "c", "before": None, "after": {"id": 20, "email": "a@x", "balance": None,
             "notes": PLACEHOLDER}, "source": {"lsn": moved_at, "ts_ms": 1}}  # fmt: skip
    value = json.dumps(moved).encode()
    src.producer.produce(case.topic, key=b'{"id": 20}', value=value, partition=0,
                         headers=[(OLD_KEY_HEADER, b'{"id": 10}')])  # fmt: skip
    src.send("c", {"id": 21, "email": "b@x", "balance": None, "notes": "n"})
    src.flush()
    summary = case.ingest()
    assert summary.outcome == "committed"
    assert state_of(case, table) == {21: ("b@x", None, "n")}
    ((partition, offset, error, raw_value),) = case.rejected()
    assert (partition, offset, raw_value) == (0, 3, value)  # c, d, tombstone; then the create
    assert error.startswith("unchanged TOAST column(s) ['notes'] of a key moved from key {\"id\": 10}")
    assert error.endswith("Set REPLICA IDENTITY FULL on the source table so Debezium sends them")
    assert case.query("select raw_key from eosflow.rejected where pipeline = %s", case.name) == [
        (b'{"id": 20}',)
    ]
    ledger = case.ledger()
    assert [(r[4], r[5], r[6]) for r in ledger] == [(3, 3, 0), (2, 1, 1)]  # read, written, rejected
    verified(case)
    summary = verify_pipeline(case.settings, case.name).table().splitlines()[-1]
    assert summary == "  ledger: 5 records read in 2 committed range(s): 4 written, 1 rejected; " \
        "eosflow.rejected holds 1"  # fmt: skip


def test_a_change_rejected_at_commit_reaches_the_ledger_once_when_the_run_dies_after_the_commit(case):
    """About 12 s. The run that rejects the moved key's create is killed once its Iceberg commit landed
    and before the ledger mirrored it: the next run mirrors the range from the table's position, its
    rejected row with it (the file the commit wrote), once."""
    from eosflow.schema.changes import OLD_KEY_HEADER, PLACEHOLDER

    table = as_iceberg_state(case)
    src = Source(case, partitions=1)
    src.send("c", {"id": 10, "email": "a@x", "balance": None, "notes": "long text"})
    moved_at = src.send("d", {"id": 10, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    moved = {"op": "c", "before": None, "after": {"id": 20, "email": "a@x", "balance": None,
             "notes": PLACEHOLDER}, "source": {"lsn": moved_at, "ts_ms": 1}}  # fmt: skip
    src.producer.produce(case.topic, key=b'{"id": 20}', value=json.dumps(moved).encode(), partition=0,
                         headers=[(OLD_KEY_HEADER, b'{"id": 10}')])  # fmt: skip
    src.flush()
    killed = case.ingest_process("--run-id", "killed", EOSFLOW_CRASH_AT="in_commit")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert "1 change(s) rejected" in killed.stderr
    assert case.rejected() == []  # committed in the table, not yet in the ledger
    assert case.ingest().records_read == 0
    assert [r[:2] for r in case.rejected()] == [(0, 3)]
    assert [(r[4], r[5], r[6]) for r in case.ledger()] == [(3, 3, 0), (1, 0, 1)]
    assert state_of(case, table) == {}
    verified(case)


def test_a_truncate_empties_every_row_older_than_it(case):
    table = as_iceberg_state(case)
    src = Source(case)
    for i in (1, 2, 3):
        src.send("c", {"id": i, "email": f"{i}@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    src.truncate()
    src.send("c", {"id": 4, "email": "after@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, table) == {4: ("after@x", None, None)}
    verified(case)


def test_two_runs_at_once_one_commits_and_the_other_is_fenced_with_nothing_visible(case, tmp_path):
    table = as_iceberg_state(case)
    src = Source(case)
    for i in range(1, 21):
        src.send("c", {"id": i, "email": f"{i}@x", "balance": None, "notes": None})
    src.send("u", {"id": 1, "email": "one@x", "balance": None, "notes": None})
    src.flush()
    zombie = case.raced_while_paused("after_stage", tmp_path)
    assert zombie.returncode == 3, zombie.stderr[-3000:]
    assert "another commit changed" in zombie.stderr
    state = state_of(case, table)
    assert len(state) == 20 and state[1] == ("one@x", None, None)
    assert {r["batch_id"] for r in scan(case, table)} == {_batch_of(case)}
    verified(case)


def _batch_of(case) -> str:
    """The one batch the ledger committed."""
    (batch,) = {
        r[0] for r in case.query("select batch_id from eosflow.ledger where pipeline = %s", case.name)
    }
    return batch


@pytest.mark.parametrize("point", ["after_stage", "in_commit"])
def test_a_run_killed_at_a_fault_point_and_its_retry_apply_each_change_once(case, point):
    table = as_iceberg_state(case)
    src = Source(case)
    for i in range(1, 11):
        src.send("c", {"id": i, "email": f"{i}@x", "balance": None, "notes": None})
    src.send("d", {"id": 2, "email": None, "balance": None, "notes": None})
    src.flush()
    killed = case.ingest_process("--run-id", "killed", EOSFLOW_CRASH_AT=point)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert len(scan(case, table)) == (9 if point == "in_commit" else 0)
    assert case.ingest().outcome == "committed"
    assert sorted(state_of(case, table)) == [1, *range(3, 11)]
    ledger = case.ledger()
    assert sum(r[4] for r in ledger) == 12  # 10 creates, a delete and its tombstone: each read once
    verified(case)


def test_a_replay_is_refused_before_anything_is_planned(case):
    from eosflow.ledger.backfill import BackfillError, BackfillRequest
    from eosflow.runners import backfill_run

    as_iceberg_state(case)
    src = Source(case, partitions=1)
    src.send("c", {"id": 1, "email": "a@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    request = BackfillRequest(case.name, "replay", (0,), 0, 1, chunk_size=100)
    with pytest.raises(BackfillError, match="no history to rebuild"):
        backfill_run.resolve(case.settings, request)


def test_verify_says_it_cannot_reread_the_last_changes_once_kafka_deleted_a_committed_range(case):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    as_iceberg_state(case)
    src = Source(case, partitions=1)
    for i in (1, 2, 3):
        src.send("c", {"id": i, "email": f"{i}@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    tp = TopicPartition(case.topic, 0, 2)  # retention, as Kafka applies it: the first two records gone
    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})  # held: its futures need it
    admin.delete_records([tp])[tp].result(30)
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
    status = {c.name: (c.status, c.message) for c in result.checks}
    assert status["state_keys_unique"][0] == status["state_coordinates_committed"][0] == "pass"
    for name in ("state_holds_last_changes", "state_holds_no_deleted_key"):
        assert status[name][0] == "not checked" and f"{case.topic}[0]" in status[name][1]


def test_verify_names_the_keys_of_a_table_doctored_behind_eosflows_back(case):
    import pyarrow as pa

    from eosflow.sinks.iceberg.catalog import catalog

    table_name = as_iceberg_state(case)
    src = Source(case)
    for i in (1, 2, 3):
        src.send("c", {"id": i, "email": f"{i}@x", "balance": None, "notes": None})
    src.send("d", {"id": 3, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    verified(case)
    table = catalog(case.settings).load_table(table_name)
    rows = table.scan().to_arrow()
    one = rows.filter(pa.compute.equal(rows["id"], 1)).to_pylist()[0]
    doctored = [
        {**one, "email": "edited"},  # id 1 twice, one of them wrong
        {**one, "id": 3, "kafka_offset": 10_000},  # a deleted key back, from outside any range
    ]
    table.append(pa.Table.from_pylist(doctored, schema=rows.schema))
    result = verify_pipeline(case.settings, case.name)
    failed = {c.name: c.rows for c in result.failed}
    assert set(failed) == set(STATE_CHECKS) - {"state_counts_add_up"}, result.table()
    assert failed["state_keys_unique"][0]["id"] == 1
    assert failed["state_coordinates_committed"][0]["id"] == 3
    assert failed["state_holds_no_deleted_key"][0]["id"] == 3
    assert failed["state_holds_last_changes"][0]["id"] == 1


def test_compact_keeps_the_state_and_its_tombstones_and_removes_the_staged_changes(case, monkeypatch):
    """The staged changes are never in a snapshot: compact removes them; the tombstone file the table's
    properties name stays, so a re-delivered older create still does not bring its deleted key back."""
    from pathlib import Path

    import psycopg

    from eosflow.sinks.iceberg.catalog import catalog
    from eosflow.sinks.iceberg.state import STAGED_FOLDER, tombstone_file

    table = as_iceberg_state(case)
    src = Source(case)
    created = {
        i: src.send("c", {"id": i, "email": f"{i}@x", "balance": None, "notes": None}) for i in (1, 2, 3)
    }
    src.flush()
    assert case.ingest().outcome == "committed"
    src.send("d", {"id": 2, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    src.send("d", {"id": 3, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"  # a second tombstone file: the first is now unreferenced
    location = Path(catalog(case.settings).load_table(table).location().removeprefix("file://"))
    staged = len(list((location / STAGED_FOLDER).glob("*.parquet")))
    assert staged >= 3  # a file a partition a run
    monkeypatch.setenv("EOSFLOW_ICEBERG_SNAPSHOT_HOURS", "0")
    monkeypatch.setenv("EOSFLOW_ICEBERG_ORPHAN_HOURS", "0")
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        done = case.pipeline.sink.compact(conn, case.pipeline, None, lambda m: None)
    assert done.removed_files >= staged + 1  # the runs' staged changes, the first tombstone file
    assert list((location / STAGED_FOLDER).glob("*.parquet")) == []
    current = tombstone_file(catalog(case.settings).load_table(table))
    assert current is not None and Path(current.removeprefix("file://")).exists()
    src.send("c", {"id": 2, "email": "2@x", "balance": None, "notes": None}, lsn=created[2])  # re-delivered
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, table) == {1: ("1@x", None, None)}
    verified(case)


def test_spark_reads_the_state_pyiceberg_reads_after_updates_and_deletes(case, spark41):
    """About 20 s (Spark's start, unless this process's reader runs already): the row-level deletes
    PyIceberg committed (files rewritten, copy on write) read by another engine as one row per key, the same
    values."""
    from tests.integration.test_iceberg_spark_reader import assert_spark_reads_what_pyiceberg_reads

    table = as_iceberg_state(case)
    src = Source(case)
    for i in range(1, 31):
        src.send("c", {"id": i, "email": f"{i}@x", "balance": f"{i}.00", "notes": "n"})
    src.flush()
    assert case.ingest().outcome == "committed"
    for i in range(1, 31, 3):
        src.send("u", {"id": i, "email": f"{i}@y", "balance": "0.50", "notes": PLACEHOLDER_TEXT})
    for i in range(2, 31, 5):
        src.send("d", {"id": i, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    got = assert_spark_reads_what_pyiceberg_reads(case, spark41, table)
    ids = [r["id"] for r in got.rows.to_pylist()]
    assert sorted(ids) == [i for i in range(1, 31) if (i - 2) % 5 != 0]
    assert {r["notes"] for r in got.rows.to_pylist()} == {"n"}  # the placeholders filled


def test_a_keyed_topic_keeps_its_state_in_iceberg_too(case):
    """No source position: a key's changes are ordered by their offsets (one key, one partition)."""
    from confluent_kafka import Producer

    from eosflow.kafka_admin import ensure_topic

    table = as_iceberg_state(case, changes="keyed", key="bigint")
    ensure_topic(case.settings.bootstrap_servers, case.topic, 1, log=lambda m: None)
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    for key, value in [(b"1", {"email": "a@x"}), (b"2", {"email": "b@x"}), (b"1", {"email": "a2@x"})]:
        producer.produce(case.topic, key=key, value=json.dumps(value).encode())
    assert producer.flush(30) == 0
    assert case.ingest().outcome == "committed"
    producer.produce(case.topic, key=b"2", value=None)  # a null value deletes the key
    producer.produce(case.topic, key=b"3", value=b'{"email": "c@x"}')
    assert producer.flush(30) == 0
    assert case.ingest().outcome == "committed"
    assert state_of(case, table) == {1: ("a2@x", None, None), 3: ("c@x", None, None)}
    assert {r["change_lsn"] for r in scan(case, table)} == {None}
    verified(case)
