"""Ordinary shapes of real topics that once stopped a pipeline or lost records (issue 13, items 1 and 3-7).

Each test reproduces the shape against the real broker, Spark and Postgres, then checks that the
pipeline keeps going (or refuses with a clear error, writing nothing) and that I1-I5 hold.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from eosflow.kafka_admin import admin, delete_topic
from eosflow.ledger import positions
from eosflow.ledger.backfill import BackfillError, BackfillRequest
from eosflow.ledger.ranges import OffsetRange
from eosflow.runners import backfill_run, job
from eosflow.sinks.postgres import partitions
from eosflow.sources.kafka.offsets import topic_id
from eosflow_dev.produce import events

pytestmark = pytest.mark.integration


def _produce_to(case, partition: int, count: int, seed: int) -> list[str]:
    """`count` valid order events into one partition; returns their event ids."""
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})
    ids = []
    for event in events.generate(seed, count):
        producer.produce(case.topic, value=event.value, key=event.key, partition=partition)
        ids.append(event.event_id)
    assert producer.flush(30) == 0
    return ids


def _delete_records(case, partition: int, before: int) -> None:
    """What retention does: everything below `before` is gone from the log."""
    client = admin(case.settings.bootstrap_servers)
    futures = client.delete_records([TopicPartition(case.topic, partition, before)])
    for future in futures.values():
        future.result(timeout=30)


def _positions(case) -> dict[int, int | None]:
    return dict(
        case.query(
            "select partition, next_offset from eosflow.positions where pipeline = %s order by 1", case.name
        )
    )


def _staging_tables(case) -> set[str]:
    return {r[0] for r in case.query("select tablename from pg_tables where schemaname = 'staging'")}


# -- item 1: idle partitions at a pipeline's first run ------------------------------------------------


def test_a_partition_idle_at_the_first_run_takes_records_later(case):
    case.create_topic(3)
    first = _produce_to(case, 0, 50, seed=1301)
    assert case.ingest().outcome == positions.COMMITTED  # partitions 1 and 2 start empty: [0, 0)

    later = _produce_to(case, 1, 1, seed=1302) + _produce_to(case, 2, 5, seed=1303)
    assert case.ingest().outcome == positions.COMMITTED
    assert sorted(case.event_ids()) == sorted(first + later)
    assert _positions(case) == {0: 50, 1: 1, 2: 5}
    assert case.violations() == []


def test_a_pipeline_starting_at_latest_picks_up_what_comes_after(case):
    case.write_config(initial_offset="latest")
    case.create_topic(2)
    _produce_to(case, 0, 20, seed=1304)  # before the pipeline existed: skipped by declaration
    assert case.ingest().outcome == positions.COMMITTED
    assert case.event_ids() == []

    after = _produce_to(case, 0, 7, seed=1305) + _produce_to(case, 1, 3, seed=1306)
    assert case.ingest().outcome == positions.COMMITTED
    assert sorted(case.event_ids()) == sorted(after)
    assert case.violations() == []


# -- item 3: acknowledged loss on a partition retention emptied -----------------------------------------


def test_acknowledging_loss_of_a_partition_retention_emptied_moves_its_position(case):
    case.create_topic(1)
    _produce_to(case, 0, 100, seed=1307)
    case.ingest(max_records=40)
    _delete_records(case, 0, 100)  # log start = log end = 100: nothing left to read

    refused = case.ingest_process()
    assert refused.returncode == 4, refused.stderr
    assert f"{case.topic}[0] [40, 100)" in refused.stderr

    assert case.ingest(acknowledge_data_loss=True).outcome == positions.COMMITTED
    assert _positions(case) == {0: 100}
    assert [row[1:4] for row in case.ledger()] == [(0, 40, "data"), (40, 100, "lost")]
    assert case.violations() == []

    # The loss is settled: the next runs neither raise it again nor trip over the ledger.
    assert case.ingest().outcome == positions.COMMITTED
    more = _produce_to(case, 0, 3, seed=1308)
    assert case.ingest().outcome == positions.COMMITTED
    assert set(more) <= set(case.event_ids())
    assert case.violations() == []


# -- item 4: a topic deleted and re-created with the same name ---------------------------------------------


def test_a_topic_recreated_with_the_same_name_is_refused_naming_both_ids(case):
    case.create_topic(1)
    _produce_to(case, 0, 30, seed=1309)
    case.ingest()
    before = (case.event_ids(), case.ledger(), _positions(case))

    old_id = topic_id(case.settings.bootstrap_servers, case.topic)
    delete_topic(case.settings.bootstrap_servers, case.topic)
    new_id = None
    for _ in range(60):  # the broker forgets the old topic, and learns the new one, asynchronously
        try:
            case.create_topic(1)
            new_id = topic_id(case.settings.bootstrap_servers, case.topic)
            break
        except Exception:
            time.sleep(0.5)
    assert new_id != old_id
    _produce_to(case, 0, 45, seed=1310)  # more records than the stored position: nothing looks wrong

    refused = case.ingest_process()
    assert refused.returncode == 2, refused.stderr
    assert "re-created" in refused.stderr and case.topic in refused.stderr
    assert old_id in refused.stderr and new_id in refused.stderr
    assert (case.event_ids(), case.ledger(), _positions(case)) == before  # nothing written


# -- item 5: catch-up chunks of a partition with no stored position ---------------------------------------


def test_a_catch_up_chunk_never_commits_before_the_one_ahead_of_it(case):
    case.create_topic(1)
    ids = _produce_to(case, 0, 300, seed=1311)
    request = BackfillRequest(case.name, "catch-up", None, chunk_size=100)
    chunks = backfill_run.resolve(case.settings, request)
    assert [(c.start, c.end) for c in chunks] == [(0, 100), (100, 200), (200, 300)]

    # Chunk 1 failed (or waits for its retry); the mapped chunk 2 runs anyway.
    with pytest.raises((BackfillError, positions.FencedError)):
        backfill_run.run_chunk(case.settings, case.name, "bf-5", chunks[1], "catch-up", log=lambda m: None)
    assert case.ledger() == [] and case.event_ids() == []

    outcomes = [
        backfill_run.run_chunk(case.settings, case.name, "bf-5b", c, "catch-up", log=lambda m: None).outcome
        for c in chunks
    ]
    assert outcomes == [positions.COMMITTED] * 3
    assert sorted(case.event_ids()) == sorted(ids)
    assert case.violations() == []


# -- item 6: replays re-read exactly what was committed, and are fenced against each other ----------------


def _count_in(case, partition: int, start: int, end: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": case.settings.bootstrap_servers,
            "group.id": "eosflow-tests",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(case.topic, partition, start)])
    seen = 0
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                break
            if msg.error() is None:
                if msg.offset() >= end:
                    break
                seen += 1
    finally:
        consumer.close()
    return seen


def test_a_replay_that_re_reads_fewer_records_than_committed_is_refused(case):
    # A compacted topic: after the replayed range was committed, the cleaner removes older values of
    # the same keys, so a re-read comes back with fewer records than the ledger holds.
    case.create_topic(
        1,
        {
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.001",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
        },
    )
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})
    for i in range(60):
        producer.produce(case.topic, key=f"k{i % 5}", value=f"v{i}", partition=0)
    producer.flush(30)
    case.ingest()
    committed_rows = len(case.rejected())  # not order events: every record is a rejected row
    assert committed_rows == 60

    deadline = time.monotonic() + 120
    while _count_in(case, 0, 0, 60) == 60:  # roll segments until the cleaner has compacted [0, 60)
        assert time.monotonic() < deadline, "the log cleaner did not compact the topic in 120 s"
        time.sleep(1)
        producer.produce(case.topic, key="roll", value="x", partition=0)
        producer.flush(10)
    fewer = _count_in(case, 0, 0, 60)

    request = BackfillRequest(case.name, "replay", (0,), 0, 60, chunk_size=60)
    (chunk,) = backfill_run.resolve(case.settings, request)
    with pytest.raises(positions.ReplayCountError) as refused:
        backfill_run.run_chunk(case.settings, case.name, "replay-6", chunk, "replay", log=lambda m: None)
    message = str(refused.value)
    assert f"{case.topic}[0] [0, 60)" in message and "60" in message and str(fewer) in message
    assert len(case.rejected()) == 60  # nothing was deleted
    assert [row[3] for row in case.ledger()] == ["data"]
    assert case.violations() == []


def test_two_replays_of_the_same_range_are_fenced_against_each_other(case, tmp_path):
    case.create_topic(1)
    _produce_to(case, 0, 80, seed=1312)
    case.ingest()
    chunk = OffsetRange(case.topic, 0, 0, 80)

    fault_dir = tmp_path / "faults"
    fault_dir.mkdir()
    paused = subprocess.Popen(
        [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", case.name, "--run-id", "replay-a",
         "--mode", "replay", "--range", f"{case.topic}:0:0-80"],
        env=case.env(EOSFLOW_PAUSE_AT="after_plan", EOSFLOW_FAULT_DIR=str(fault_dir)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (fault_dir / "after_plan.paused").exists():
            assert paused.poll() is None, paused.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.2)
        second = backfill_run.run_chunk(
            case.settings, case.name, "replay-b", chunk, "replay", log=lambda m: None
        )
        assert second.outcome == positions.COMMITTED
        (fault_dir / "after_plan.resume").touch()
        out, err = paused.communicate(timeout=300)
    finally:
        paused.kill()
    assert paused.returncode == 3, err
    assert "FENCED" in err
    assert [row[3] for row in case.ledger()] == ["data", "replay"]
    assert case.violations() == []


# -- item 7: `eosflow ingest --range/--mode` is validated like a backfill ------------------------------


def test_ingest_range_outside_what_a_backfill_allows_is_refused_before_anything_is_written(case):
    case.create_topic(1)
    _produce_to(case, 0, 60, seed=1313)
    case.ingest(max_records=30)  # committed [0, 30)
    before = (case.ledger(), _positions(case))

    cases = [
        (f"{case.topic}:0:30-60", "replay", "never committed"),  # beyond the position
        (f"{case.topic}:0:40-60", "catch-up", "stored position"),  # skips [30, 40)
        ("other.topic:0:0-10", "catch-up", "other.topic"),  # another topic
        (f"{case.topic}:5:0-10", "catch-up", "no partition 5"),
    ]
    for spec, mode, why in cases:
        done = case.ingest_process("--range", spec, "--mode", mode, "--run-id", f"r-{mode}-{spec}")
        assert done.returncode == 2, (spec, done.stderr)
        assert why in done.stderr, (spec, done.stderr)
    assert (case.ledger(), _positions(case)) == before


# -- also: staging left behind ------------------------------------------------------------------------------


def test_a_fenced_batch_leaves_no_staging_behind(case):
    case.create_topic(1)
    _produce_to(case, 0, 40, seed=1314)
    # Plan a run, let another commit first, then run the stale plan: fenced, and its staging gone.
    plan, _ = job.prepare(case.settings, case.name, "stale", log=lambda m: None)
    assert case.ingest(run_id="fresh").outcome == positions.COMMITTED
    with pytest.raises(positions.FencedError):
        case.ingest(run_id="stale")
    staged = partitions.staged_child(plan.batch_id, case.topic, 0).split(".")[1]
    assert staged not in _staging_tables(case)
    assert not case.query("select 1 from staging.ranges where batch_id = %s", plan.batch_id)
    assert not case.query("select 1 from staging.rejected where batch_id = %s", plan.batch_id)


def test_the_staging_of_a_crashed_batch_is_swept_by_a_later_run(case):
    case.create_topic(1)
    _produce_to(case, 0, 40, seed=1315)
    crashed = case.ingest_process("--run-id", "crashed", EOSFLOW_CRASH_AT="after_stage")
    assert crashed.returncode != 0
    batch = f"{case.name}:crashed"
    table = partitions.staged_child(batch, case.topic, 0).split(".")[1]  # staged, never attached
    assert table in _staging_tables(case)
    # Nobody retried it for a day: a later run of the pipeline drops it.
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        conn.execute(
            "update eosflow.plans set created_at = now() - interval '2 days' where batch_id = %s", (batch,)
        )
    assert case.ingest().outcome == positions.COMMITTED
    assert table not in _staging_tables(case)
    assert not case.query("select 1 from staging.ranges where batch_id = %s", batch)
