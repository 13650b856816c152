"""Offset-range backfills against the real stack: catch-up in ordered chunks, replay, refusals."""

from __future__ import annotations

import pytest

from eosflow.ledger import positions
from eosflow.ledger.backfill import BackfillError, BackfillRequest
from eosflow.runners import backfill_run

pytestmark = pytest.mark.integration


def _transform_versions(case) -> dict[int, str]:
    return dict(
        case.query(f"select kafka_offset, transform_version from {case.table} where kafka_partition = 0")
    )


def test_catch_up_in_chunks_commits_in_order_and_lands_everything_once(case):
    manifest = case.produce(1_000, seed=301, partitions=1)
    case.ingest(max_records=300)  # a pipeline far behind: position 300 of 1000
    request = BackfillRequest(case.name, "catch-up", None, chunk_size=250)
    chunks = backfill_run.resolve(case.settings, request)
    assert [(c.start, c.end) for c in chunks] == [(300, 550), (550, 800), (800, 1000)]
    summaries = backfill_run.run(case.settings, request, "bf-1", chunks, log=lambda m: None)
    assert [s.outcome for s in summaries] == [positions.COMMITTED] * 3
    assert sorted(case.event_ids()) == sorted(r.event_id for r in manifest.visible())
    assert case.violations() == []
    # Retrying the whole backfill with the same run id re-runs nothing.
    again = backfill_run.run(case.settings, request, "bf-1", chunks, log=lambda m: None)
    assert [s.outcome for s in again] == [positions.ALREADY_COMMITTED] * 3


def test_replay_after_a_transform_version_change_replaces_that_range_only(case):
    case.produce(600, seed=302, partitions=1)
    case.ingest()
    before = _transform_versions(case)
    assert set(before.values()) == {"v1"} and len(before) == 600

    case.write_config(transform_version="v2")
    request = BackfillRequest(case.name, "replay", (0,), 100, 300, chunk_size=150)
    chunks = backfill_run.resolve(case.settings, request)
    summaries = backfill_run.run(case.settings, request, "replay-1", chunks, log=lambda m: None)
    assert [s.outcome for s in summaries] == [positions.COMMITTED, positions.COMMITTED]

    after = _transform_versions(case)
    assert sorted(after) == sorted(before)  # same records, none lost, none doubled
    assert {o for o, v in after.items() if v == "v2"} == set(range(100, 300))
    assert case.violations() == []
    replays = [row for row in case.ledger() if row[3] == "replay"]
    assert [(r[1], r[2]) for r in replays] == [(100, 250), (250, 300)]
    assert case.query("select next_offset from eosflow.positions where pipeline = %s", case.name) == [(600,)]


def test_refusals_come_before_any_spark_work_with_their_reason(case):
    case.produce(200, seed=303, partitions=2)
    case.ingest(max_records=50)
    cases = [
        (BackfillRequest("no_such_pipeline", "catch-up", None), "unknown pipeline"),
        (BackfillRequest(case.name, "catch-up", (5,)), "has no partition 5"),
        (BackfillRequest(case.name, "catch-up", (0,), 10, 40), "must start at the stored position 50"),
        (BackfillRequest(case.name, "catch-up", (0,), 50, 10_000), "beyond the last stable offset"),
        (BackfillRequest(case.name, "replay", (0,), 20, 10), "ends before it starts"),
        (BackfillRequest(case.name, "replay", (0,), 40, 90), "was never committed"),
    ]
    for request, message in cases:
        with pytest.raises(BackfillError, match=message):
            backfill_run.resolve(case.settings, request)
    plans = case.query(
        "select count(*) from eosflow.plans where pipeline = %s and kind <> 'ingest'", case.name
    )
    assert plans == [(0,)]  # nothing was planned, so nothing was read


def test_backfill_cli_refuses_then_runs_by_time(case):
    case.produce(300, seed=304, partitions=1)
    refused = case.ingest_process()  # first a normal run, so a position exists
    assert refused.returncode == 0
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "eosflow.cli", "backfill", "--pipeline", case.name]
    bad = subprocess.run(
        [*cmd, "--mode", "replay", "--from-time", "2026-01-01T00:00:00"],
        env=case.env(),
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "has no time zone" in bad.stderr
    dry = subprocess.run(
        [*cmd, "--mode", "replay", "--from-time", "2000-01-01T00:00:00Z", "--dry-run"],
        env=case.env(),
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    assert f"{case.topic}[0] [0, 300)" in dry.stderr


def test_a_backfill_and_a_scheduled_run_cannot_corrupt_each_other(case):
    from eosflow.runners import job

    manifest = case.produce(500, seed=305, partitions=1)
    case.ingest(max_records=100)
    # A scheduled run plans [100, 500) ...
    planned, _ = job.prepare(case.settings, case.name, "scheduled-1", log=lambda m: None)
    assert [(r.start, r.end) for r in planned.nonempty] == [(100, 500)]
    # ... but a catch-up backfill commits those offsets first.
    request = BackfillRequest(case.name, "catch-up", None, chunk_size=1000)
    backfill_run.run(
        case.settings, request, "bf-race", backfill_run.resolve(case.settings, request), log=lambda m: None
    )
    # The scheduled run, resuming with its persisted plan, is fenced and writes nothing.
    late = case.ingest_process("--run-id", "scheduled-1")
    assert late.returncode == 3
    assert "FENCED" in late.stderr and "planned from 100, position is now 500" in late.stderr
    assert sorted(case.event_ids()) == sorted(r.event_id for r in manifest.visible())
    assert case.violations() == []
