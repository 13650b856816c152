"""Exactly-once ingestion against the real broker, real Spark and real Postgres (DESIGN.md steps 1-5)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer

from eosflow.ledger import positions

pytestmark = pytest.mark.integration


def _visible_ids(*manifests) -> list[str]:
    return sorted(r.event_id for m in manifests for r in m.visible())


def test_events_land_exactly_once_then_a_rerun_is_a_noop_then_new_data_is_picked_up(case):
    first = case.produce(3_000, seed=101)
    summary = case.ingest()
    assert summary.outcome == positions.COMMITTED
    assert sorted(case.event_ids()) == _visible_ids(first)
    assert sum(c.read for c in summary.counts.values()) == 3_000

    again = case.ingest()
    assert again.outcome == positions.COMMITTED
    assert not again.plan.nonempty  # nothing new: no Spark work, no new ledger rows
    assert len(case.event_ids()) == 3_000

    second = case.produce(1_000, seed=102)
    third = case.ingest()
    assert sum(c.read for c in third.counts.values()) == 1_000
    assert all(p.range.start > 0 for p in third.plan.partitions if not p.range.empty)  # from stored positions
    assert sorted(case.event_ids()) == _visible_ids(first, second)
    assert case.violations() == []


def test_aborted_transactions_never_land_and_offset_holes_reconcile(case):
    manifest = case.produce(2_000, seed=103, transactional_id=f"{case.name}-tx", txn_size=50, abort_ratio=0.3)
    assert manifest.counts()["aborted"] > 0
    case.ingest()
    assert sorted(case.event_ids()) == _visible_ids(manifest)
    ledger = case.ledger()
    read = sum(row[4] for row in ledger)
    span = sum(row[2] - row[1] for row in ledger)
    assert read == manifest.counts()["committed"]
    assert span > read  # aborted records and control markers leave holes the ranges cover
    assert case.violations() == []


def test_replaying_the_same_run_id_changes_nothing(case):
    case.produce(500, seed=104)
    assert case.ingest(run_id="run-1").outcome == positions.COMMITTED
    before = (sorted(case.event_ids()), case.ledger())
    case.produce(300, seed=105)  # new data must not sneak into a replay of run-1
    replay = case.ingest(run_id="run-1")
    assert replay.outcome == positions.ALREADY_COMMITTED
    assert (sorted(case.event_ids()), case.ledger()) == before


def test_two_runs_started_together_one_commits_the_other_is_fenced(case):
    manifest = case.produce(2_000, seed=106)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "eosflow.cli",
                "ingest",
                "--pipeline",
                case.name,
                "--run-id",
                f"concurrent-{i}",
            ],
            env=case.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 3], [(code, err[-2500:]) for code, _, err in results]
    loser = next(err for code, _, err in results if code == 3)
    assert "FENCED" in loser and "Nothing was written" in loser
    assert sorted(case.event_ids()) == _visible_ids(manifest)
    assert case.violations() == []


@pytest.mark.parametrize("point", ["after_plan", "after_read", "after_stage", "in_commit", "after_commit"])
def test_a_killed_run_leaves_no_trace_or_a_complete_batch_and_the_retry_finishes(case, point):
    manifest = case.produce(
        1_500, seed=107, transactional_id=f"{case.name}-tx", txn_size=100, abort_ratio=0.2
    )
    crashed = case.ingest_process("--run-id", "r1", EOSFLOW_CRASH_AT=point)
    assert crashed.returncode == -9, crashed.stderr[-2000:]  # really killed, not an exception
    assert f"SIGKILL at {point}" in crashed.stderr
    landed = len(case.event_ids())
    assert landed == (len(manifest.visible()) if point == "after_commit" else 0)

    retry = case.ingest(run_id="r1")  # what an orchestrator retry does: same run id, same plan
    assert retry.reused_plan
    assert retry.outcome == (positions.ALREADY_COMMITTED if point == "after_commit" else positions.COMMITTED)
    assert sorted(case.event_ids()) == _visible_ids(manifest)
    assert case.violations() == []
    assert (
        case.query("select count(*) from staging.rejected where batch_id like %s", f"{case.name}:%")[0][0]
        == 0
    )


def _wait_for_log_start(case, minimum: int, timeout: float = 90.0) -> int:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tp = TopicPartition(case.topic, 0)
        start = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result().offset
        if start >= minimum:
            return start
        time.sleep(1)
    raise AssertionError(f"retention did not delete the first segment of {case.topic} within {timeout}s")


def test_records_deleted_by_retention_before_the_first_run_fail_loudly_then_can_be_acknowledged(case):
    # Retention is real: records stamped two days ago fall outside a one-hour retention, so Kafka
    # deletes their segment; the fresh records after them stay.
    from eosflow_dev.produce import events

    case.write_config(initial_offset="offset:0")
    case.create_topic(1, {"retention.ms": "3600000", "segment.ms": "3600000"})
    old = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})
    two_days_ago = int(time.time() * 1000) - 2 * 86_400_000
    for event in events.generate(108, 200):
        old.produce(case.topic, value=event.value, key=event.key, partition=0, timestamp=two_days_ago)
    old.flush(10)
    late = case.produce(150, seed=109, partitions=1)  # rolls a new segment: the old one can go
    log_start = _wait_for_log_start(case, 200)
    assert log_start == 200

    refused = case.ingest_process()
    assert refused.returncode == 4
    assert "DATA LOSS" in refused.stderr and f"{case.topic}[0] [0, {log_start})" in refused.stderr
    assert "--acknowledge-data-loss" in refused.stderr
    assert case.event_ids() == []

    accepted = case.ingest(acknowledge_data_loss=True)
    assert accepted.outcome == positions.COMMITTED
    ledger = case.ledger()
    assert ledger[0][:4] == (0, 0, log_start, "lost")
    assert ledger[1][1] == log_start and ledger[1][3] == "data"
    survivors = set(case.event_ids())
    assert set(r.event_id for r in late.visible()) <= survivors  # what Kafka still had all landed
    assert case.violations() == []


def test_a_partition_added_between_runs_is_read_from_its_beginning(case):
    first = case.produce(600, seed=110, partitions=2)
    case.ingest()
    second = case.produce(900, seed=111, partitions=3)  # grows the topic to 3 partitions
    assert any(r.partition == 2 for r in second.visible())
    summary = case.ingest()
    new = next(p for p in summary.plan.partitions if p.range.partition == 2)
    assert new.first_seen and new.range.start == 0
    assert sorted(case.event_ids()) == _visible_ids(first, second)
    assert case.violations() == []


def test_every_kind_of_bad_record_is_rejected_with_its_offset_and_reason(case):
    case.create_topic(1)
    good = {
        "event_id": "0b7e1c52-3f0e-4f5e-9a43-6f7f0d5b1a01",
        "event_type": "order_paid",
        "event_time": "2026-01-01T00:00:00.000Z",
        "order_id": "ord-1",
        "customer_id": "cus-1",
        "amount_cents": 100,
        "currency": "EUR",
        "schema_version": 1,
    }
    bad = [
        (None, "null value"),
        (b"x" * 5000, "oversized"),
        (b'{"event_id": "\xff\xfe"}', "not UTF-8"),
        (b"this is not json", "not JSON"),
        (
            json.dumps({k: v for k, v in good.items() if k != "amount_cents"}).encode(),
            "missing field: amount_cents",
        ),
        (json.dumps(good | {"amount_cents": "lots"}).encode(), "mistyped field: amount_cents"),
    ]
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})
    producer.produce(case.topic, value=json.dumps(good).encode(), key=b"k", partition=0)
    for value, _ in bad:
        producer.produce(case.topic, value=value, key=b"k", partition=0)
    producer.produce(
        case.topic, value=json.dumps(good | {"event_id": good["event_id"][:-1] + "2"}).encode(), partition=0
    )
    producer.flush(10)

    summary = case.ingest()
    rejected = case.rejected()
    assert [off for _, off, _, _ in rejected] == list(range(1, len(bad) + 1))  # each bad record, by offset
    for (_, _, err, raw), (value, expect) in zip(rejected, bad, strict=True):
        assert err.startswith(expect)
        assert (bytes(raw) if raw is not None else None) == value  # the raw bytes are kept untouched
    assert len(case.event_ids()) == 2
    c = summary.counts[(case.topic, 0)]
    assert (c.read, c.written, c.rejected) == (8, 2, 6)
    assert case.violations() == []


# Text that CSV, COPY or a trimming writer could get wrong: separators, quotes, line breaks, COPY's
# end-of-data marker alone on a line, surrounding spaces, backslashes, tabs, empty and non-ASCII.
AWKWARD = [
    "a,b",
    'say "hi"',
    "two\nlines",
    "x\n\\.\ny",
    "\\.",
    "  padded  ",
    "back\\slash",
    "tab\tcr\r",
    "",
    "zoë ✓",
]


def test_awkward_text_lands_exactly_as_produced(case):
    case.create_topic(1)
    good = {
        "event_id": "0b7e1c52-3f0e-4f5e-9a43-6f7f0d5b1a01",
        "event_type": "order_paid",
        "event_time": "2026-01-01T00:00:00.123456Z",
        "amount_cents": 100,
        "currency": "EUR",
        "schema_version": 1,
    }
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})
    for i, text in enumerate(AWKWARD):
        event_id = good["event_id"][:-2] + f"{i:02d}"
        value = good | {"event_id": event_id, "order_id": text, "customer_id": text[::-1]}
        producer.produce(
            case.topic,
            value=json.dumps(value).encode(),
            key=text.encode(),
            headers=[("h", text.encode()), ("none", None)],
            partition=0,
            timestamp=1767225600123 + i,
        )
    no_key = good | {"order_id": "o", "customer_id": "c"}
    producer.produce(case.topic, value=json.dumps(no_key).encode(), key=None, partition=0)
    producer.produce(case.topic, value=b'x,"y"\n\\.\n\xff', key=b"\x00\xff,\n", partition=0)  # rejected
    producer.flush(10)

    case.ingest()
    rows = case.query(
        f"select kafka_key, order_id, customer_id, kafka_headers, kafka_timestamp, event_time "
        f"from {case.table} order by kafka_offset"
    )
    assert len(rows) == len(AWKWARD) + 1
    assert [(r[0], r[1], r[2]) for r in rows[: len(AWKWARD)]] == [(t, t, t[::-1]) for t in AWKWARD]
    assert [r[3] for r in rows[: len(AWKWARD)]] == [
        [{"key": "h", "value": t}, {"key": "none", "value": None}] for t in AWKWARD
    ]
    assert [int(r[4].timestamp() * 1000) for r in rows[: len(AWKWARD)]] == [
        1767225600123 + i for i in range(len(AWKWARD))
    ]
    assert {r[5].isoformat() for r in rows} == {"2026-01-01T00:00:00.123456+00:00"}
    assert rows[-1][0] is None  # the record without a key: NULL, not ''
    ((raw_key, raw_value, error),) = case.query(
        "select raw_key, raw_value, error from eosflow.rejected where pipeline = %s", case.name
    )
    assert (bytes(raw_key), bytes(raw_value), error) == (b"\x00\xff,\n", b'x,"y"\n\\.\n\xff', "not UTF-8")
    assert case.violations() == []


def test_the_job_runs_under_spark_submit_with_shipped_code(case):
    from eosflow.spark.submit import spark_env, spark_submit_args

    manifest = case.produce(400, seed=112)
    spark_submit = str(__import__("pathlib").Path(sys.executable).parent / "spark-submit")
    done = subprocess.run(
        [spark_submit, *spark_submit_args(case.settings, case.name, "submitted-1")],
        env=case.env(**spark_env(case.settings)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "outcome: COMMITTED" in done.stdout
    assert sorted(case.event_ids()) == _visible_ids(manifest)
