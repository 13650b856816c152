"""A `sink: iceberg` pipeline against the real broker, Spark, Postgres and a catalog: one Iceberg commit per
run holds the files and the positions, read back by PyIceberg.

Every test runs on the embedded default (the SQL catalog in the warehouse, files on the local disk); those
parametrized by `lake` also on Apache Iceberg's REST catalog server or with the files on the S3 server
(tests/integration/lakes.py): exactly once after kill -9, concurrent runs fenced, replay, compaction, verify.
Each behaviour runs on the lakes where it can differ (the catalog's commit, the store's files), not on all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal

import pytest
from confluent_kafka import Producer

from eosflow.runners import job
from eosflow.sinks.iceberg.config import PROPERTIES_ENV
from eosflow.verify import verify_pipeline
from tests.integration.lakes import LAKES, lake_properties
from tests.integration.test_stream import Stream, no_stream_left_behind  # noqa: F401  (autouse here too)

pytestmark = pytest.mark.integration

BAD = [b"not json", b'{"event_id": 1}', None]
every_lake = pytest.mark.parametrize("lake", LAKES, indirect=True)
# The fence is the catalog's compare-and-swap, and the "s3" lake is the SQL catalog (its files elsewhere):
# the fence tests run on each catalog, not each store (the S3 store has its kill, compaction, reader tests).
CATALOGS = ("sql", "rest")


@pytest.fixture(autouse=True)
def lake(request, running_stack, monkeypatch) -> str:
    """Where the test's table lives (`sql` unless the test is marked every_lake): set as eosflow's catalog
    properties, which the in-process runs and the subprocesses both read."""
    kind = getattr(request, "param", "sql")
    properties = lake_properties(running_stack, kind, request.node.name)
    if properties is None:
        monkeypatch.delenv(PROPERTIES_ENV, raising=False)
    else:
        monkeypatch.setenv(PROPERTIES_ENV, json.dumps(properties))
    return kind


def as_iceberg_sink(case) -> str:
    """The case's pipeline with `sink: iceberg`, writing lake.<name>; returns the table's name."""
    case.spec.pop("target_table", None)
    case.write_config(sink="iceberg", table=f"lake.{case.name}")
    return f"lake.{case.name}"


def scan(case, table: str) -> list[dict]:
    """The table as a reader that is not eosflow's write path sees it: a PyIceberg scan."""
    from eosflow.sinks.iceberg.catalog import catalog

    return catalog(case.settings).load_table(table).scan().to_arrow().to_pylist()


def rows_in(case, table: str) -> int:
    """How many rows the table holds (0 before the first run made it)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return len(scan(case, table))
    except NoSuchTableError:
        return 0


def produce_bad(case, partition: int) -> None:
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    for value in BAD:
        producer.produce(case.topic, value=value, key=b"bad", partition=partition)
    producer.flush(10)


@every_lake
def test_an_iceberg_sink_lands_every_record_once_with_its_positions_in_the_table(case):
    table = as_iceberg_sink(case)
    manifest = case.produce(300, seed=31, partitions=3)
    produce_bad(case, partition=1)
    summary = case.ingest()
    assert summary.outcome == "committed"
    rows = scan(case, table)
    assert sorted(str(r["event_id"]) for r in rows) == sorted(str(a.event_id) for a in manifest.visible())
    assert len({(r["kafka_topic"], r["kafka_partition"], r["kafka_offset"]) for r in rows}) == 300
    assert len(case.rejected()) == len(BAD)
    ledger = case.ledger()
    assert (sum(r[4] for r in ledger), sum(r[5] for r in ledger), sum(r[6] for r in ledger)) == (303, 300, 3)
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()

    again = case.ingest()  # nothing new: positions only where needed, nothing twice
    assert again.records_read == 0 and again.outcome == "committed"
    more = case.produce(50, seed=32, partitions=3)
    assert case.ingest().outcome == "committed"
    assert len(scan(case, table)) == 300 + len(more.visible())
    assert verify_pipeline(case.settings, case.name).ok


def test_two_runs_planned_alike_commit_once_and_the_other_is_fenced(case):
    from eosflow.runners import job

    table = as_iceberg_sink(case)
    case.produce(100, seed=33, partitions=1)
    first, _ = job.prepare(case.settings, case.name, "first", log=lambda m: None)
    second, _ = job.prepare(case.settings, case.name, "second", log=lambda m: None)
    assert first.ranges == second.ranges
    assert case.ingest("second").outcome == "committed"
    with pytest.raises(Exception, match="fenced"):
        case.ingest("first")
    assert len(scan(case, table)) == 100
    assert verify_pipeline(case.settings, case.name).ok


@pytest.mark.parametrize(
    ("lake", "point"),
    [("sql", "after_stage"), ("sql", "in_commit"), ("rest", "in_commit"), ("s3", "after_stage")],
    indirect=["lake"],
)
def test_a_run_killed_before_or_after_its_iceberg_commit_leaves_every_record_once(case, point):
    """after_stage: the files written, the commit not made (nothing visible); in_commit: committed in
    the table, the ledger not told (the next run mirrors it, rejected rows and all)."""
    table = as_iceberg_sink(case)
    manifest = case.produce(120, seed=34, partitions=2)
    produce_bad(case, partition=0)
    killed = case.ingest_process("--run-id", "killed", EOSFLOW_CRASH_AT=point)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert len(scan(case, table)) == (120 if point == "in_commit" else 0)
    assert case.ingest().outcome == "committed"
    rows = scan(case, table)
    assert sorted(str(r["event_id"]) for r in rows) == sorted(str(a.event_id) for a in manifest.visible())
    assert len(case.rejected()) == len(BAD)
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_table_name_that_is_not_namespace_dot_name_is_refused(case):
    case.spec.pop("target_table", None)
    case.write_config(sink="iceberg", table="NoNamespace")
    run = subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", case.name],
        env=case.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "namespace.name" in run.stderr


@pytest.mark.parametrize("lake", CATALOGS, indirect=True)
def test_a_run_paused_before_its_commit_is_fenced_by_the_catalog_when_another_committed(case, tmp_path):
    """The paused run loaded the table before the other committed: its own check of the positions passes
    on what it loaded, and only the catalog's compare-and-swap (no retry) stops it."""
    table = as_iceberg_sink(case)
    case.produce(200, seed=35, partitions=2)
    zombie = case.raced_while_paused("after_stage", tmp_path)
    assert zombie.returncode == 3, zombie.stderr[-3000:]
    assert "another commit changed" in zombie.stderr
    assert len(scan(case, table)) == 200
    assert verify_pipeline(case.settings, case.name).ok


def test_a_stream_into_an_iceberg_table_commits_each_record_once(case, tmp_path):
    """One Iceberg commit per micro-batch, through the same protocol as a batch run."""
    table = as_iceberg_sink(case)
    first = case.produce(300, seed=36, partitions=2)
    stream = Stream(case, tmp_path / "stream.log")
    stream.wait_for(lambda: rows_in(case, table) >= 300)
    second = case.produce(200, seed=37, partitions=2)
    stream.wait_for(lambda: rows_in(case, table) >= 500)
    assert stream.stop() == 0
    ids = [str(r["event_id"]) for r in scan(case, table)]
    assert sorted(ids) == sorted(str(r.event_id) for r in first.rows + second.rows)  # each once
    assert verify_pipeline(case.settings, case.name).ok


@pytest.mark.parametrize("lake", ["sql", "s3"], indirect=True)
def test_compact_merges_small_files_expires_snapshots_and_removes_a_crashed_runs_files(case, monkeypatch):
    """Positions are table properties: a rewrite and an expiry carry them over, so the next run goes on."""
    import psycopg

    from eosflow.sinks.iceberg.catalog import catalog, positions

    table = as_iceberg_sink(case)
    for seed in (41, 42, 43):  # three runs: three commits of small files in today's partition
        case.produce(40, seed=seed, partitions=2)
        assert case.ingest().outcome == "committed"
    case.produce(40, seed=44, partitions=2)
    crashed = case.ingest_process("--run-id", "crashed", EOSFLOW_CRASH_AT="after_stage")
    assert crashed.returncode == -9  # its files are written and named by nothing
    before = catalog(case.settings).load_table(table)
    rows, held = sorted(map(str, (r["event_id"] for r in scan(case, table)))), positions(before)
    files_before = len(before.inspect.files())
    monkeypatch.setenv("EOSFLOW_ICEBERG_SNAPSHOT_HOURS", "0")
    monkeypatch.setenv("EOSFLOW_ICEBERG_ORPHAN_HOURS", "0")
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        done = case.pipeline.sink.compact(conn, case.pipeline, None, print)
    after = catalog(case.settings).load_table(table)
    assert done.merged_files == files_before >= 3 and len(after.inspect.files()) == done.into < files_before
    assert done.expired_snapshots >= 3 and len(after.metadata.snapshots) == 1
    assert done.removed_files >= 2  # the crashed run's files, the merged ones
    assert sorted(map(str, (r["event_id"] for r in scan(case, table)))) == rows
    assert positions(after) == held
    assert case.ingest().outcome == "committed"  # the crashed run's records, once
    assert len(scan(case, table)) == 160
    assert verify_pipeline(case.settings, case.name).ok


def test_an_avro_topic_of_every_declared_type_lands_in_an_iceberg_table(case, running_stack):
    """The Avro clicks declaration (uuid, numeric, arrays, a map, dates, NaN, a bigint key) into Iceberg:
    typed columns in the table, the poison records rejected rows, as for a warehouse table."""
    import dataclasses
    from decimal import Decimal

    import fastavro

    from eosflow.schema.avro import SchemaRegistry, encode
    from tests.avro_clicks import DECLARATION, WRITER, click
    from tests.integration.test_declared_pipeline import _produce

    assert running_stack.registry is not None
    case.write_config(**DECLARATION, key="bigint")
    case.settings = dataclasses.replace(case.settings, schema_registry_url=running_stack.registry.url)
    table = as_iceberg_sink(case)
    schema_id = SchemaRegistry(running_stack.registry).register(f"{case.topic}-value", WRITER)
    parsed = fastavro.parse_schema(WRITER)
    good = [(str(i).encode(), encode(schema_id, parsed, click(i))) for i in range(1, 5)]
    poison = [(b"6", b'{"click_id": "json, not avro"}'), (b"eleven", encode(schema_id, parsed, click(12)))]
    _produce(case.settings.bootstrap_servers, case.topic, good + poison)
    assert case.ingest().outcome == "committed"
    rows = sorted(scan(case, table), key=lambda r: r["kafka_key"])
    assert [r["kafka_key"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["price"] == Decimal("9999999999.99") and rows[0]["n_items"] == 1
    assert len(case.rejected()) == len(poison)
    assert verify_pipeline(case.settings, case.name).ok


def _replay(case, start: int, end: int, run_id: str, chunk_size: int = 1_000):
    from eosflow.ledger.backfill import BackfillRequest
    from eosflow.runners import backfill_run

    request = BackfillRequest(case.name, "replay", (0,), start, end, chunk_size=chunk_size)
    chunks = backfill_run.resolve(case.settings, request)
    return backfill_run.run(case.settings, request, run_id, chunks, log=lambda m: None)


def _versions(case, table: str) -> dict[int, str]:
    return {r["kafka_offset"]: r["transform_version"] for r in scan(case, table)}


@pytest.mark.parametrize("lake", ["sql", "rest"], indirect=True)
def test_a_replay_replaces_its_range_in_one_iceberg_commit_rejected_rows_and_all(case):
    """A transform change replayed over part of the history: the range's rows and rejected rows are
    replaced (none lost, none doubled), the position stays, the ledger mirrors a replay row per chunk."""
    from eosflow.sinks.iceberg.catalog import catalog, positions

    table = as_iceberg_sink(case)
    manifest = case.produce(300, seed=36, partitions=1)
    produce_bad(case, partition=0)  # offsets 300..302 of partition 0
    assert case.ingest().outcome == "committed"
    before = _versions(case, table)
    assert set(before.values()) == {"v1"} and len(before) == 300

    case.write_config(transform_version="v2")
    done = _replay(case, 100, 303, "replay-1", chunk_size=150)
    assert [s.outcome for s in done] == ["committed", "committed"]
    after = _versions(case, table)
    assert sorted(after) == sorted(before)  # the same records, none lost, none doubled
    assert {o for o, v in after.items() if v == "v2"} == set(range(100, 300))
    assert sorted(str(r["event_id"]) for r in scan(case, table)) == sorted(
        str(a.event_id) for a in manifest.visible()
    )
    assert [r[1] for r in case.rejected()] == [300, 301, 302]  # replaced, not added
    replays = [(r[1], r[2], r[4], r[5], r[6]) for r in case.ledger() if r[3] == "replay"]
    assert replays == [(100, 250, 150, 150, 0), (250, 303, 53, 50, 3)]
    held = positions(catalog(case.settings).load_table(table))[(case.topic, 0)]
    assert (held.offset, held.replays) == (303, 2)
    assert case.query(
        "select next_offset, replays from eosflow.positions where pipeline = %s", case.name
    ) == [(303, 2)]
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()

    again = _replay(case, 100, 303, "replay-1", chunk_size=150)  # the same run id: nothing twice
    assert [s.outcome for s in again] == ["already committed"] * 2
    assert _versions(case, table) == after
    more = case.produce(40, seed=37, partitions=1)  # and the pipeline goes on from where it was
    assert case.ingest().outcome == "committed"
    assert len(scan(case, table)) == 300 + len(more.visible())
    held = positions(catalog(case.settings).load_table(table))[(case.topic, 0)]
    assert held.offset > 303 and held.replays == 2  # a commit moves the position, keeps the replay count
    assert verify_pipeline(case.settings, case.name).ok


def test_a_replay_killed_after_its_iceberg_commit_is_mirrored_once_by_the_next_run(case):
    table = as_iceberg_sink(case)
    case.produce(120, seed=38, partitions=1)
    produce_bad(case, partition=0)
    assert case.ingest().outcome == "committed"
    case.write_config(transform_version="v2")
    killed = case.ingest_process(
        "--run-id", "replay-killed", "--range", f"{case.topic}:0:0-123", "--mode", "replay",
        EOSFLOW_CRASH_AT="in_commit",
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert set(_versions(case, table).values()) == {"v2"}  # committed in the table
    assert [r for r in case.ledger() if r[3] == "replay"] == []  # not in the ledger
    assert case.ingest().outcome == "committed"  # its reconcile mirrors the replay first
    assert [(r[1], r[2], r[4]) for r in case.ledger() if r[3] == "replay"] == [(0, 123, 123)]
    assert len(case.rejected()) == len(BAD) and len(scan(case, table)) == 120
    assert case.query("select replays from eosflow.positions where pipeline = %s", case.name) == [(1,)]
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_replay_retried_after_another_replay_committed_is_fenced_and_one_short_of_rows_is_refused(case):
    """A replay killed after its plan, retried (same run id, same plan) after another replay of the range
    committed: fenced by the table's replay count. Then a row deleted behind eosflow's back: the re-read
    no longer matches what is committed, and nothing is written."""
    from eosflow.ledger.positions import ReplayCountError
    from eosflow.ledger.ranges import OffsetRange
    from eosflow.sinks.iceberg.catalog import catalog
    from eosflow.sinks.iceberg.commit import in_range

    table = as_iceberg_sink(case)
    case.produce(100, seed=39, partitions=1)
    assert case.ingest().outcome == "committed"
    slow = ("--run-id", "slow", "--range", f"{case.topic}:0:0-100", "--mode", "replay")
    killed = case.ingest_process(*slow, EOSFLOW_CRASH_AT="after_plan")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert [s.outcome for s in _replay(case, 0, 100, "quick")] == ["committed"]
    retried = case.ingest_process(*slow)
    assert retried.returncode == 3, retried.stderr[-3000:]
    assert "planned after 0 replay(s), the table holds 1" in retried.stderr
    assert len([r for r in case.ledger() if r[3] == "replay"]) == 1

    catalog(case.settings).load_table(table).delete(in_range(OffsetRange(case.topic, 0, 10, 11)))
    with pytest.raises(ReplayCountError, match="re-read 100 records, 99 are committed"):
        _replay(case, 0, 100, "after-the-loss")
    assert len(scan(case, table)) == 99


def test_verify_runs_dbts_invariants_by_name_over_the_table_and_names_a_row_lost_behind_eosflows_back(case):
    """dbt's I1-I6 (named as for a warehouse pipeline, recorded for the view) over what a PyIceberg scan
    reads; a row deleted from the table outside eosflow fails I4 naming its range."""
    from eosflow.ledger.ranges import OffsetRange
    from eosflow.sinks.iceberg.catalog import catalog
    from eosflow.sinks.iceberg.commit import in_range

    table = as_iceberg_sink(case)
    case.produce(60, seed=40, partitions=2)
    produce_bad(case, partition=1)
    assert case.ingest().outcome == "committed"
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
    named = {c.name: c.invariant for c in result.checks if c.invariant}
    assert named == {
        "unique_kafka_coordinates": "I1",
        "ledger_ranges_contiguous": "I2",
        "rows_inside_committed_ranges": "I3",
        "range_counts_reconcile": "I4",
        "positions_match_ledger": "I5",
        "no_duplicate_business_keys": "I6",
    }
    assert case.query(
        "select count(*) from information_schema.tables where table_schema = 'eosflow_iceberg'"
    ) == [(0,)]  # the copy it checked is gone

    catalog(case.settings).load_table(table).delete(in_range(OffsetRange(case.topic, 0, 5, 6)))
    broken = verify_pipeline(case.settings, case.name)
    assert not broken.ok
    (i4,) = [c for c in broken.failed if c.invariant]
    assert i4.name == "range_counts_reconcile" and i4.rows[0]["partition"] == 0, broken.table()
    recorded = case.query(
        "select name, status from eosflow.checks where pipeline = %s and invariant = 'I4' "
        "order by checked_at desc limit 1",
        case.name,
    )
    assert recorded == [("range_counts_reconcile", "fail")]


def test_a_run_committing_while_another_prepares_is_not_taken_for_a_ledger_behind(case, monkeypatch):
    """Another run's Iceberg commit and ledger mirror, landing between this run's look at the table and its
    look at the ledger, are no gap to explain (found by the randomized schedule's two concurrent ingests:
    the table read first still said 3, the ledger read after it already said 43)."""
    from eosflow.ledger import mirror

    table = as_iceberg_sink(case)
    case.produce(30, seed=43, partitions=2)
    case.ingest(run_id="first", max_records=5)
    case.produce(30, seed=47, partitions=2)

    reconcile = mirror.reconcile
    others: list[str] = []

    def another_run_commits_first(*args, **kwargs):
        if not others:  # the other run: a whole ingest, between this run's two looks
            others.append("running")
            others[0] = case.ingest(run_id="other").outcome
        return reconcile(*args, **kwargs)

    monkeypatch.setattr(mirror, "reconcile", another_run_commits_first)
    summary = case.ingest(run_id="this")

    assert others == ["committed"]
    assert summary.outcome == "committed"
    assert sum(r[4] for r in case.ledger()) == 60  # every record read once, over the three runs
    assert len(scan(case, table)) == 60
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_runs_files_every_reader_opens_and_one_named_the_old_way_is_warned_about_then_rewritten(case):
    """A run's data and rejected-row files are named of [A-Za-z0-9._-] only, each holding its batch in its
    Parquet metadata; a data file named as an older eosflow named it (the raw batch id, colons and all)
    makes verify warn without failing, and compact rewrites it under a safe name, same rows."""
    import psycopg
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    from eosflow.sinks.iceberg.catalog import catalog, rejected_files
    from eosflow.sinks.iceberg.names import readable_name

    table = as_iceberg_sink(case)
    case.produce(40, seed=45, partitions=2)
    produce_bad(case, partition=1)
    assert case.ingest().outcome == "committed"
    t = catalog(case.settings).load_table(table)
    data = t.inspect.files().column("file_path").to_pylist()
    rejected = [f for files in rejected_files(t).values() for f in files]
    assert data and rejected and all(readable_name(p) for p in data + rejected), data + rejected
    for path in data + rejected:
        with t.io.new_input(path).open() as f:
            meta, rows = pq.read_metadata(f).metadata, pq.read_table(f)
        assert {meta[b"eosflow.batch_id"].decode()} == set(rows.column("batch_id").to_pylist())
        assert meta[b"eosflow.pipeline"].decode() == case.name and b":" in meta[b"eosflow.batch_id"]

    # One data file as an older eosflow named it: the same rows, the batch id's colons in the name.
    (old,) = [task.file for task in t.scan().plan_files() if task.file.file_path == data[0]]
    batch = scan(case, table)[0]["batch_id"]
    colon = f"{t.location()}/data/{batch}-{case.topic}-0-old.parquet"
    with t.io.new_input(old.file_path).open() as src, t.io.new_output(colon).create() as dst:
        dst.write(src.read())
    with t.transaction() as tx, tx.update_snapshot().overwrite() as swap:
        swap.delete_data_file(old)
        swap.append_data_file(parquet_file_to_data_file(t.io, t.metadata, colon))
    rows = sorted(str(r["event_id"]) for r in scan(case, table))
    warned = verify_pipeline(case.settings, case.name)
    assert warned.ok, warned.table()
    warning = warned.check("iceberg_file_names")
    assert warning.status == "warn" and warning.failures == 1 and batch in (warning.message or "")
    assert f"eosflow compact --pipeline {case.name}" in warned.table()
    assert case.query(
        "select status, failures from eosflow.checks where pipeline = %s and name = 'iceberg_file_names'",
        case.name,
    ) == [("warn", 1)]

    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        done = case.pipeline.sink.compact(conn, case.pipeline, None, print)
    assert done.renamed == 1
    after = catalog(case.settings).load_table(table)
    assert all(readable_name(p) for p in after.inspect.files().column("file_path").to_pylist())
    assert sorted(str(r["event_id"]) for r in scan(case, table)) == rows
    again = verify_pipeline(case.settings, case.name)
    assert again.ok and "iceberg_file_names" not in {c.name for c in again.checks}, again.table()


@pytest.mark.parametrize("lake", CATALOGS, indirect=True)
def test_a_run_whose_records_are_all_rejected_is_fenced_by_the_catalog_too(case, tmp_path, lake):
    """A commit that adds no data file (every record rejected) still makes a snapshot and asserts the one it
    started from: a REST catalog applies a commit whose requirements hold, and none asserts properties, so
    without it the zombie's positions would land over the newer run's."""
    import psycopg

    as_iceberg_sink(case)
    case.create_topic(1)
    produce_bad(case, partition=0)
    zombie = case.raced_while_paused("after_stage", tmp_path)
    assert zombie.returncode == 3, zombie.stderr[-3000:]
    assert "another commit changed" in zombie.stderr
    assert len(case.rejected()) == len(BAD)  # the newer run's, once
    assert [(r[4], r[6]) for r in case.ledger()] == [(len(BAD), len(BAD))]
    assert verify_pipeline(case.settings, case.name).ok
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:  # no data file: nothing to do
        done = case.pipeline.sink.compact(conn, case.pipeline, None, print)
    assert (done.merged_files, done.removed_files) == (0, 0)


def _nothing_written(case) -> None:
    assert case.ledger() == [] and case.rejected() == []


def test_a_catalog_that_does_not_answer_is_refused_before_anything_is_written(case, monkeypatch):
    import socket

    as_iceberg_sink(case)
    case.produce(20, seed=50, partitions=1)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(PROPERTIES_ENV, json.dumps({"uri": f"http://127.0.0.1:{port}", "token": "tok-S3CRET"}))
    run = case.ingest_process()
    assert run.returncode == 1, run.stderr[-3000:]
    assert f"the rest Iceberg catalog 'eosflow' at http://127.0.0.1:{port} did not answer" in run.stderr
    assert "troubleshooting.md#icebergunavailableerror" in run.stderr and "S3CRET" not in run.stderr
    _nothing_written(case)


@pytest.mark.parametrize("wrong", ["bucket", "secret"])
def test_a_bucket_that_is_not_there_or_credentials_it_refuses_are_refused_without_the_secret(
    case, running_stack, monkeypatch, wrong
):
    from eosflow_dev.stack import optional

    s3 = optional.s3(running_stack, log=lambda m: None)
    as_iceberg_sink(case)
    case.produce(20, seed=51, partitions=1)
    properties = lake_properties(running_stack, "s3", case.name)
    assert properties is not None
    if wrong == "bucket":
        properties["warehouse"] = f"s3://no-such-bucket-{case.name[:20]}/tables"
    else:
        properties["s3.secret-access-key"] = "wrong-S3CRET-x9"
    monkeypatch.setenv(PROPERTIES_ENV, json.dumps(properties))
    run = case.ingest_process()
    assert run.returncode == 2, run.stderr[-3000:]
    assert "refused" in run.stderr and "troubleshooting.md#icebergaccesserror" in run.stderr
    assert "S3CRET" not in run.stderr and s3.secret_key not in run.stderr
    _nothing_written(case)


def test_a_table_another_writer_changed_incompatibly_is_refused_before_a_file_is_written(case):
    from eosflow.sinks.iceberg.catalog import catalog

    table = as_iceberg_sink(case)
    case.produce(20, seed=52, partitions=1)
    assert case.ingest().outcome == "committed"
    t = catalog(case.settings).load_table(table)
    with t.update_schema() as update:  # another engine's ALTER TABLE ... DROP NOT NULL
        update.update_column("kafka_offset", required=False)
    files = set(_files_under(t))
    case.produce(20, seed=53, partitions=1)
    run = case.ingest_process()
    assert run.returncode == 2, run.stderr[-3000:]
    assert f"Iceberg table {table} was changed by another writer: column kafka_offset was made optional" in (
        run.stderr
    )
    assert set(_files_under(t)) == files  # not a file more
    assert sum(r[4] for r in case.ledger()) == 20


def _files_under(table) -> list[str]:
    from pyarrow import fs

    from eosflow.sinks.iceberg import storage

    filesystem, root = storage.filesystem(storage.io_properties(table), table.location())
    selector = fs.FileSelector(root.rstrip("/"), recursive=True, allow_not_found=True)
    return [i.path for i in filesystem.get_file_info(selector) if i.type == fs.FileType.File]


@pytest.mark.parametrize("lake", ["s3"], indirect=True)
def test_a_run_killed_mid_upload_to_object_storage_is_retried_into_every_record_once(case, lake):
    """Killed with its Parquet files' bytes sent to the S3 server and the uploads not completed: nothing of
    it is visible, the retry commits every record once, compaction then removes what the kill left."""
    table = as_iceberg_sink(case)
    manifest = case.produce(150, seed=54, partitions=2)
    killed = case.ingest_process("--run-id", "killed", EOSFLOW_CRASH_AT="in_file_upload")
    assert killed.returncode != 0 and "SIGKILL at in_file_upload" in killed.stderr, killed.stderr[-3000:]
    assert rows_in(case, table) == 0 and case.ledger() == []
    assert case.ingest().outcome == "committed"
    rows = scan(case, table)
    assert sorted(str(r["event_id"]) for r in rows) == sorted(str(a.event_id) for a in manifest.visible())
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_widening_and_a_removed_column_apply_by_iceberg_promotion_and_lose_nothing(case):
    """docs/DESIGN.md, "Declarations that evolve", on Iceberg: int to long and a decimal's precision by
    Iceberg's own promotion (no file rewritten), a column removed kept and NULL; a narrowing, and integer to
    double, which Iceberg cannot promote, refused before a file is written."""
    from eosflow.sinks.iceberg.catalog import catalog

    table = as_iceberg_sink(case)
    case.write_config(
        columns=[
            {"name": "id", "type": "integer", "required": True},
            {"name": "price", "type": "numeric(10,2)"},
            {"name": "sku", "type": "text"},
        ],
        business_key="id",
    )
    case.create_topic(1)
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    producer.produce(case.topic, value=b'{"id": 1, "price": 12.5, "sku": "a"}', partition=0)
    producer.flush(10)
    assert case.ingest().outcome == "committed"
    first_files = set(_files_under(catalog(case.settings).load_table(table)))

    case.write_config(
        columns=[
            {"name": "id", "type": "bigint", "required": True},
            {"name": "price", "type": "numeric(14,2)"},
        ]
    )
    producer.produce(case.topic, value=f'{{"id": {2**40}, "price": 123456789012.25}}'.encode(), partition=0)
    producer.flush(10)
    logged: list[str] = []
    assert job.run(case.settings, case.name, None, log=logged.append).outcome == "committed"

    t = catalog(case.settings).load_table(table)
    types = {f.name: str(f.field_type) for f in t.schema().fields}
    assert (types["id"], types["price"], types["sku"]) == ("long", "decimal(14, 2)", "string")
    assert first_files <= set(_files_under(t))  # promoted in the metadata: the first file is still read
    rows = sorted((r["id"], r["price"], r["sku"]) for r in scan(case, table))
    assert rows == [(1, Decimal("12.50"), "a"), (2**40, Decimal("123456789012.25"), None)]
    assert verify_pipeline(case.settings, case.name).ok
    assert any("widened column id from integer to bigint" in m for m in logged), logged

    # A narrowing, and integer to double (no promotion of Iceberg's): refused, not a file written.
    files = set(_files_under(t))
    producer.produce(case.topic, value=b'{"id": 3}', partition=0)
    producer.flush(10)
    for declared in ("integer", "double"):
        case.write_config(columns=[{"name": "id", "type": declared, "required": True}])
        run = case.ingest_process()
        assert run.returncode == 2, run.stderr[-3000:]
        assert f"column id is bigint in the target but declared {declared}" in run.stderr
        assert "Iceberg promotes only int to long" in run.stderr
        assert set(_files_under(catalog(case.settings).load_table(table))) == files
