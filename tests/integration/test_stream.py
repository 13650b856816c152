"""`eosflow stream` on the real stack: micro-batches through the same ledger as batch runs, a batch run
racing it (the later commit is fenced and the stream re-plans), SIGTERM in the middle of a batch (that
batch commits whole, exit 0), and kill -9 at every step boundary (a restart resumes from the ledger)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eosflow.observe.health import check
from tests.integration.ingest_case import IngestCase

pytestmark = pytest.mark.integration


class Stream:
    """`eosflow stream` in a process of its own, its stderr in a file (read while it runs)."""

    started: list[subprocess.Popen] = []  # killed after each test, so a failed test leaves no stream behind

    def __init__(self, case: IngestCase, log: Path, *args: str, **env: str) -> None:
        self.log = log
        cmd = [sys.executable, "-m", "eosflow.cli", "stream", "--pipeline", case.name, "--trigger", "300ms"]
        self.proc = subprocess.Popen(
            [*cmd, "--every-batch", *args],
            env=case.env(**env),
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )
        Stream.started.append(self.proc)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, what, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert self.proc.poll() is None, (
                f"the stream exited ({self.proc.returncode}):\n{self.output()[-3000:]}"
            )
            assert time.monotonic() < deadline, f"timed out; the stream's log:\n{self.output()[-3000:]}"
            time.sleep(0.2)

    def stop(self, timeout: float = 120.0) -> int:
        self.wait_for(lambda: "streaming pipeline" in self.output())  # its signal handlers are in place
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


@pytest.fixture(autouse=True)
def no_stream_left_behind():
    """After each test: any stream it started and left running is killed (a failed test's, too)."""
    yield
    while Stream.started:
        proc = Stream.started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def committed(case: IngestCase) -> int:
    return case.query(f"select count(*) from {case.table}")[0][0]


def assert_exactly_once(case: IngestCase, manifest_ids: list[str]) -> None:
    ids = case.event_ids()
    assert len(ids) == len(set(ids)), "an event was committed twice"
    assert sorted(ids) == sorted(manifest_ids)
    assert case.violations() == []


def test_a_stream_commits_each_record_once_and_re_plans_when_a_batch_run_commits_first(case, tmp_path):
    first = case.produce(600, seed=81, partitions=3)
    before = check(case.settings, case.name, stale_after_s=3600)
    assert (before.lag, before.last_commit_age_s, before.ok) == (600, None, False)  # waiting, no stream
    fault = tmp_path / "fault"
    fault.mkdir()
    # The stream stops in its first batch with records, staged and not committed...
    stream = Stream(
        case, tmp_path / "stream.log", EOSFLOW_PAUSE_AT="after_stage", EOSFLOW_FAULT_DIR=str(fault)
    )
    stream.wait_for(lambda: (fault / "after_stage.paused").exists())
    # ...while a scheduled batch run commits the same offsets first.
    batch = case.ingest_process()
    assert batch.returncode == 0, batch.stderr[-2000:]
    assert committed(case) == 600
    (fault / "after_stage.resume").touch()
    stream.wait_for(lambda: "fenced, re-planning" in stream.output())

    second = case.produce(400, seed=82, partitions=3)
    stream.wait_for(lambda: committed(case) == 1000)
    assert stream.stop() == 0
    out = stream.output()
    assert "SIGTERM: finishing the batch in flight" in out and "stopped after" in out
    assert "started Spark" not in out  # every batch was small enough to read in the stream's process
    assert_exactly_once(case, [r.event_id for r in first.rows + second.rows])
    # Every micro-batch is an ordinary batch of its own in the ledger; idle triggers left no plan.
    plans = case.query("select status, count(*) from eosflow.plans where pipeline = %s group by 1", case.name)
    planned = dict(plans)
    assert planned["committed"] >= 2 and planned.get("planned") == 1  # the fenced batch, abandoned

    # What the health-check DAG sees: caught up; then records waiting with the stream stopped.
    after = check(case.settings, case.name, stale_after_s=3600)
    assert after.ok and after.lag == 0 and after.last_commit_age_s < 300
    case.produce(50, seed=86, partitions=3)
    assert check(case.settings, case.name, stale_after_s=3600).ok  # committed within the hour
    stale = check(case.settings, case.name, stale_after_s=0)
    assert not stale.ok and stale.lag == 50 and "STALE: 50 records wait" in stale.line()


def test_a_stream_starts_spark_for_its_first_batch_past_the_inline_limit_and_keeps_it(case, tmp_path):
    """Batches past EOSFLOW_INLINE_MAX_OFFSETS read through Spark, which the first of them starts and the
    stream keeps: a small batch between two large ones reads in process, the second large one reuses it."""
    produced = case.produce(300, seed=89, partitions=2).rows  # ~300 offsets a batch: past the limit of 100
    stream = Stream(case, tmp_path / "stream.log", EOSFLOW_INLINE_MAX_OFFSETS="100")
    stream.wait_for(lambda: ": committed, " in stream.output())  # the first commit made the table
    assert committed(case) == 300
    produced += case.produce(40, seed=90, partitions=2).rows  # within the limit: in process
    stream.wait_for(lambda: committed(case) == 340)
    produced += case.produce(300, seed=91, partitions=2).rows  # through the session already started
    stream.wait_for(lambda: committed(case) == 640)
    assert stream.stop() == 0
    out = stream.output()
    assert out.count("started Spark for a batch past EOSFLOW_INLINE_MAX_OFFSETS (100 offsets)") == 1, out
    batches = [line for line in out.splitlines() if re.search(r"batch \d+: committed, [1-9]", line)]
    through_spark = [line for line in batches if "spark start" in line]
    assert len(through_spark) == 2 and len(batches) >= 3, batches  # the small batch did not go through Spark
    assert_exactly_once(case, [r.event_id for r in produced])


def test_a_stream_merges_the_children_its_commits_attach_as_it_goes(case, tmp_path):
    """Each commit attaches a child per range, and every later commit's ATTACH pays for each child the target
    holds (0.07 s a commit at the start of a 5,000/s stream, 0.68 s 500 batches later): the stream merges
    its own every --compact-every, leaving a few children where there were a few per batch."""
    produced = case.produce(900, seed=92, partitions=3).rows
    stream = Stream(case, tmp_path / "stream.log", "--max-batch-records", "15", "--compact-every", "3s")
    stream.wait_for(lambda: ": committed, " in stream.output())  # the first commit made the table
    stream.wait_for(lambda: committed(case) == 900)
    # A pass merges what the commits since the last one attached, and never merges its merged children
    # again (a row is copied once): at 1s, a slow machine's pass found two batches (CI left 31 children
    # of 61 ranges). The last batches are merged by a pass the stream runs while idle.
    stream.wait_for(lambda: len(children_of(case)) < data_ranges(case) / 2, timeout=60)
    assert stream.stop() == 0
    out = stream.output()
    merges = [line for line in out.splitlines() if "merged the stream's small commits" in line]
    assert merges and "merge(s)" in merges[0], out[-3000:]
    assert data_ranges(case) >= 60  # 20 batches of 3 ranges or more: most of them merged away
    assert_exactly_once(case, [r.event_id for r in produced])


def test_a_stream_told_not_to_merge_leaves_a_child_per_range(case, tmp_path):
    produced = case.produce(90, seed=93, partitions=3).rows
    stream = Stream(case, tmp_path / "stream.log", "--max-batch-records", "15", "--compact-every", "off")
    stream.wait_for(lambda: ": committed, " in stream.output())  # the first commit made the table
    stream.wait_for(lambda: committed(case) == 90)
    assert stream.stop() == 0
    assert "merged the stream's small commits" not in stream.output()
    assert len(children_of(case)) == data_ranges(case) >= 6  # a child per range: 2 batches of 3 or more
    assert_exactly_once(case, [r.event_id for r in produced])


def data_ranges(case: IngestCase) -> int:
    """The pipeline's committed ranges that hold offsets (each attached a child)."""
    return case.query(
        "select count(*) from eosflow.ledger where pipeline = %s and kind = 'data' "
        "and end_offset > start_offset",
        case.name,
    )[0][0]


def children_of(case: IngestCase) -> list:
    import psycopg

    from eosflow.sinks.postgres import partitions

    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        return partitions.children(conn, case.table)


def test_sigterm_in_the_middle_of_a_batch_lets_it_commit_whole_then_exits_0(case, tmp_path):
    manifest = case.produce(300, seed=83, partitions=2)
    fault = tmp_path / "fault"
    fault.mkdir()
    stream = Stream(
        case, tmp_path / "stream.log", EOSFLOW_PAUSE_AT="after_stage", EOSFLOW_FAULT_DIR=str(fault)
    )
    stream.wait_for(lambda: (fault / "after_stage.paused").exists())
    stream.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert stream.proc.poll() is None  # still standing in the batch, not dead
    (fault / "after_stage.resume").touch()
    assert stream.proc.wait(120) == 0, stream.output()[-3000:]
    assert committed(case) == 300  # the batch in flight committed whole before the exit
    assert_exactly_once(case, [r.event_id for r in manifest.rows])


# The two boundaries where a kill leaves work behind (staged rows; a commit whose outcome the stream never
# learned); the stream's randomized schedule and `make lab` kill it at every boundary.
@pytest.mark.parametrize("point", ["after_stage", "in_commit"])
def test_a_stream_killed_at_a_step_boundary_restarts_from_the_ledger(case, tmp_path, point):
    """Slow because it starts three real streams (two killed at the boundary, one restarted), each with
    its own Spark session."""
    ids = []
    for round_, seed in enumerate((84, 85)):
        ids += [r.event_id for r in case.produce(200, seed=seed + 10 * round_, partitions=2).rows]
        crashed = Stream(case, tmp_path / f"crash{round_}.log", EOSFLOW_CRASH_AT=point)
        assert crashed.proc.wait(180) == -signal.SIGKILL, crashed.output()[-3000:]
    restarted = Stream(case, tmp_path / "restart.log")
    restarted.wait_for(lambda: committed(case) == 400)
    assert restarted.stop() == 0
    assert_exactly_once(case, ids)


def test_a_stream_into_a_kafka_sink_produces_each_record_once(case, tmp_path):
    from eosflow.verify import verify_pipeline
    from tests.kafka_reader import read_all

    case.as_kafka_sink()
    first = case.produce(300, seed=87, partitions=2)
    stream = Stream(case, tmp_path / "stream.log")
    stream.wait_for(
        lambda: "batch 1: committed" in stream.output() or "batch 2: committed" in stream.output()
    )
    second = case.produce(200, seed=88, partitions=2)
    stream.wait_for(lambda: len(read_all(case.settings, case.output_topic)) >= 500)
    assert stream.stop() == 0
    out = read_all(case.settings, case.output_topic)
    assert sorted(json_ids(out)) == sorted(r.event_id for r in first.rows + second.rows)  # each once
    assert verify_pipeline(case.settings, case.name).ok  # the ledger's ranges against both topics


def json_ids(records) -> list[str]:
    import json

    return [json.loads(m.value())["event_id"] for m in records]
