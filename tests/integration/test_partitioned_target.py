"""Exactly-once targets partitioned by offset range: attach without scan, overlap refused, compaction,
replays through a child, and the migration of a target made before (issue 15)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psycopg
import pytest

from eosflow.ledger import positions
from eosflow.ledger.backfill import BackfillRequest
from eosflow.runners import backfill_run
from eosflow.schema import ddl
from eosflow.sinks.postgres import partitions
from eosflow.sinks.postgres.compact import compact

pytestmark = pytest.mark.integration


def _children(case) -> list[partitions.Child]:
    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        return partitions.children(conn, case.table)


def _partition(case) -> subprocess.CompletedProcess:
    """`eosflow partition --pipeline <case>`, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "partition", "--pipeline", case.name],
        env=case.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _data_ranges(case) -> list[tuple[int, int, int]]:
    return [(p, s, e) for p, s, e, kind, *_ in case.ledger() if kind == "data" and e > s]


def test_each_committed_range_is_a_logged_child_of_the_target_and_overlap_is_refused(case):
    case.produce(300, seed=501, partitions=3)
    case.ingest(max_records=60)
    case.ingest()

    children = _children(case)
    assert sorted((c.partition, c.start, c.end) for c in children) == sorted(_data_ranges(case))
    assert sum(c.rows for c in children) == case.query(f"select count(*) from {case.table}")[0][0]
    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        persistence = {
            r[0]
            for r in conn.execute(
                "select c.relpersistence from pg_inherits i join pg_class c on c.oid = i.inhrelid "
                "where i.inhparent = %s::regclass",
                (case.table,),
            )
        }
        assert persistence == {"p"}  # never unlogged: a crash would empty an attached child
        # Postgres itself refuses a second child over committed offsets (I1 enforced, not only checked).
        first = children[0]
        for statement in partitions.create_child(
            case.table, "staging.overlap", first.topic, first.partition, first.start, first.start + 1
        ):
            conn.execute(statement)
        with pytest.raises(psycopg.errors.InvalidObjectDefinition, match="would overlap partition"):
            conn.execute(
                partitions.attach(
                    case.table, "staging.overlap", first.topic, first.partition, first.start, first.start + 1
                )
            )
    assert case.violations() == []
    assert case.query("select count(*) from staging.ranges where batch_id like %s", f"{case.name}%") == [(0,)]


def test_attaching_a_staged_child_neither_scans_it_nor_builds_its_index(running_stack):
    with psycopg.connect(running_stack.warehouse_dsn) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute(
            "create temp table parent (kafka_topic text not null, kafka_partition int not null, "
            "kafka_offset bigint not null, v text, primary key (kafka_topic, kafka_partition, kafka_offset)) "
            "partition by range (kafka_topic, kafka_partition, kafka_offset)"
        )
        for statement in partitions.create_child("pg_temp.parent", "pg_temp.child", "t", 0, 100, 200):
            conn.execute(statement)
        conn.execute("insert into pg_temp.child select 't', 0, g, 'x' from generate_series(100, 199) g")
        conn.execute(partitions.add_key("pg_temp.child"))
        (index_before,) = conn.execute(
            "select indexrelid from pg_index where indrelid = 'pg_temp.child'::regclass"
        ).fetchone()
        conn.execute("set client_min_messages = debug1")
        conn.execute(partitions.attach("pg_temp.parent", "pg_temp.child", "t", 0, 100, 200))
        conn.execute("reset client_min_messages")
        assert any("is implied by existing constraints" in n for n in notices), notices
        (index_after,) = conn.execute(
            "select indexrelid from pg_index where indrelid = 'pg_temp.child'::regclass"
        ).fetchone()
        assert index_after == index_before  # the child's key was taken over, not built again


def test_compaction_merges_adjacent_children_and_changes_no_row(case):
    case.produce(400, seed=502, partitions=2)
    for _ in range(4):
        case.ingest(max_records=50)
    before = case.query(f"select kafka_partition, kafka_offset, event_id from {case.table} order by 1, 2")
    assert len(_children(case)) == 8

    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        summary = compact(conn, case.name, case.table, target_rows=1_000)

    assert (summary.children_before, summary.children_after) == (8, 2)
    ranges = _data_ranges(case)
    rows = dict(case.query(f"select kafka_partition, count(*) from {case.table} group by 1"))
    assert [(c.partition, c.start, c.end, c.rows) for c in _children(case)] == [
        (p, min(s for q, s, _ in ranges if q == p), max(e for q, _, e in ranges if q == p), rows[p])
        for p in (0, 1)
    ]
    after = case.query(f"select kafka_partition, kafka_offset, event_id from {case.table} order by 1, 2")
    assert after == before
    assert case.violations() == []
    # Runs go on after it; a replay cutting through the merged child replaces only its range.
    assert case.ingest().outcome == positions.COMMITTED
    middle = [(s, e) for p, s, e in _data_ranges(case) if p == 0][1]  # inside the merged child
    request = BackfillRequest(case.name, "replay", (0,), middle[0] + 1, middle[1], chunk_size=1_000)
    chunks = backfill_run.resolve(case.settings, request)
    (summary,) = backfill_run.run(case.settings, request, "replay-1", chunks, log=lambda m: None)
    assert summary.outcome == positions.COMMITTED
    assert case.query(f"select count(*) from {case.table}") == [(400 - len(case.rejected()),)]
    assert case.violations() == []


def test_a_paced_compaction_is_told_the_merges_planned_and_may_stop_between_them(case):
    """How a stream paces its merges (and stops them when it stops): between() before each but the first."""
    case.produce(400, seed=505, partitions=2)
    for _ in range(3):
        case.ingest(max_records=50)
    asked: list[int] = []

    def between(merges: int) -> bool:
        asked.append(merges)
        return False

    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        summary = compact(conn, case.name, case.table, between=between)
    assert asked == [2] and len(summary.merged) == 1  # one per partition planned, the second left
    assert summary.skipped == ["1 merge(s): stopped before them"]
    assert len(_children(case)) == 4 and case.violations() == []


def test_a_child_at_the_target_size_is_left_alone(case):
    case.produce(300, seed=503, partitions=1)
    case.ingest(max_records=150)
    case.ingest(max_records=60)
    case.ingest(max_records=60)
    first, second, third = (c.rows for c in _children(case))
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        summary = compact(conn, case.name, case.table, target_rows=second + third)
    assert first > second + third  # the first child is full already
    assert [c.rows for c in _children(case)] == [first, second + third]
    assert len(summary.merged) == 1


def test_a_merge_copies_without_the_partitions_lock_and_gives_up_when_a_replay_commits_meanwhile(
    case, tmp_path, monkeypatch
):
    """A merge builds its child while the partition's commits and replays go on (a stream's commits waited
    up to 6.7 s while a merge copied under the lock); a replay committing meanwhile rewrote rows the copy
    holds, so the merge drops its copy and changes nothing, and the next one merges."""
    case.produce(300, seed=504, partitions=1)
    for _ in range(3):
        case.ingest(max_records=40)
    fault = tmp_path / "fault"
    fault.mkdir()
    monkeypatch.setenv("EOSFLOW_PAUSE_AT", "compact_copied")
    monkeypatch.setenv("EOSFLOW_FAULT_DIR", str(fault))
    merging: dict = {}

    def merge() -> None:
        with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
            merging["summary"] = compact(conn, case.name, case.table)

    thread = threading.Thread(target=merge)
    thread.start()
    deadline = time.monotonic() + 60
    while not (fault / "compact_copied.paused").exists():
        assert thread.is_alive() and time.monotonic() < deadline, merging
        time.sleep(0.05)
    # The merged child is built, nothing swapped: a commit and a replay of the partition do not wait for it.
    assert case.ingest(max_records=40).outcome == positions.COMMITTED
    case.replay_all()
    children = _children(case)
    (fault / "compact_copied.resume").touch()
    thread.join(60)
    summary = merging["summary"]
    assert summary.merged == [] and "a replay" in summary.skipped[0], summary.line()
    assert _children(case) == children  # nothing swapped
    assert case.query("select count(*) from pg_tables where tablename like 'compact_%%'") == [(0,)]
    assert case.violations() == []
    monkeypatch.delenv("EOSFLOW_PAUSE_AT")
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        assert len(compact(conn, case.name, case.table).merged) == 1  # the next one merges
    assert case.query(f"select count(*) from {case.table}") == [(160 - len(case.rejected()),)]
    assert case.violations() == []


def test_a_target_made_before_partitioning_keeps_working_and_migrates_with_one_command(case):
    # The shape exactly-once targets had before: one table with the offsets as primary key.
    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        conn.execute("create schema if not exists raw")
        conn.execute(ddl.create_table(case.table, case.pipeline.schema, keyed=False))
        conn.execute(f"alter table {case.table} add primary key (kafka_topic, kafka_partition, kafka_offset)")
        conn.execute(f"create view raw.{case.name}_v as select * from {case.table}")
    case.produce(300, seed=504, partitions=2)
    case.ingest(max_records=100)  # committed the old way: insert from staging
    before = case.query(f"select kafka_partition, kafka_offset, event_id from {case.table} order by 1, 2")

    done = _partition(case)

    assert done.returncode == 0, done.stderr
    assert "is partitioned: 2 children" in done.stderr and "eosflow verify" in done.stderr
    assert [(c.partition, c.start, c.end) for c in _children(case)] == [(0, 0, 100), (1, 0, 100)]
    assert (
        case.query(f"select kafka_partition, kafka_offset, event_id from {case.table} order by 1, 2")
        == before
    )
    assert case.ingest().outcome == positions.COMMITTED  # the next run attaches
    assert len(_children(case)) == 4
    assert case.violations() == []
    again = _partition(case)
    assert again.returncode == 0 and "partitioned already" in again.stderr


def test_two_targets_sharing_their_first_24_characters_both_commit_and_compact(case):
    """Two pipelines on one topic whose tables differ only after 24 characters (a re-ingest into a _v2
    table, as DESIGN advises after a declaration change) once named their children alike."""
    import yaml

    from eosflow.runners import job

    base = f"raw.{case.name}_enriched_by_customer"[:40]
    first, second = base, f"{base}_v2"
    assert first.split(".")[1][:24] == second.split(".")[1][:24]
    spec = {k: v for k, v in case.spec.items() if k != "target_table"}
    case.config_path.write_text(
        yaml.safe_dump(
            {
                "pipelines": {
                    f"{case.name}_a": spec | {"target_table": first},
                    f"{case.name}_b": spec | {"target_table": second},
                }
            }
        )
    )
    expected = []
    for seed in (771, 772):  # two runs: two children per partition, for compaction to merge
        expected += [r.event_id for r in case.produce(100, seed=seed, partitions=2).visible()]
        for name in (f"{case.name}_a", f"{case.name}_b"):
            summary = job.run(case.settings, name, log=lambda m: None)
            assert summary.outcome == positions.COMMITTED, name
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        for name, table in ((f"{case.name}_a", first), (f"{case.name}_b", second)):
            assert len(partitions.children(conn, table)) == 4
            compact(conn, name, table)  # each target's merged children under names of its own
            assert len(partitions.children(conn, table)) == 2  # one per partition
            assert sorted(str(r[0]) for r in conn.execute(f"select event_id from {table}")) == sorted(
                expected
            )
