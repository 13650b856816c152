"""The stream's figures: nearest-rank percentiles, a window of batches, the status line, durations."""

from __future__ import annotations

import argparse

import pytest

from eosflow.cli.stream import duration, duration_or_off
from eosflow.runners.stream_status import BatchFigures, StreamStatus, percentiles


def test_percentiles_are_values_that_occurred_by_nearest_rank():
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentiles(values) == (50.0, 95.0, 99.0)
    assert percentiles([3.0]) == (3.0, 3.0, 3.0)
    assert percentiles([]) == ()
    assert percentiles([5.0, 1.0, 4.0, 2.0, 3.0], (0.5, 1.0)) == (3.0, 5.0)


def test_the_status_covers_the_last_batches_and_counts_fenced_and_idle_since_the_start():
    status = StreamStatus(window=2)
    status.add(BatchFigures("b1", "committed", 100, 1.0, {"t[0]": 5}, (9.0,) * 100))
    status.add(BatchFigures("b2", "fenced", 0, 1.0, {}))
    status.add(BatchFigures("b3", "committed", 300, 1.0, {"t[0]": 0, "t[1]": 2}, (1.0,) * 300))
    status.add(BatchFigures("b4", "idle", 0, 1.0, {}))
    assert (status.total_batches, status.total_records, status.fenced, status.idle) == (4, 400, 1, 1)
    assert status.latency() == (1.0, 1.0, 1.0)  # b1's 9 s latencies left the window
    line = status.line()
    assert "batches 4 (fenced 1, idle 1)" in line and "last 2: 300 records, 150 records/s" in line
    assert "no records" not in line and "lag 0 (caught up)" in line  # the last batch found nothing new


@pytest.mark.parametrize(("text", "seconds"), [("2s", 2.0), ("500ms", 0.5), ("1m", 60.0), ("1.5", 1.5)])
def test_durations(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["0s", "-1s", "2h", "soon", ""])
def test_durations_refused_name_the_expected_form(text):
    with pytest.raises(argparse.ArgumentTypeError, match="like 2s, 500ms or 1m"):
        duration(text)


@pytest.mark.parametrize(("text", "seconds"), [("off", None), ("OFF", None), ("30s", 30.0), ("1m", 60.0)])
def test_compact_every_is_a_duration_or_off(text, seconds):
    assert duration_or_off(text) == seconds


def test_the_streams_summary_spans_each_partition_from_its_first_committed_offset_to_its_last():
    """The stream's lineage in summary: committed batches merged per partition, counts summed."""
    from eosflow.ledger.positions import PartitionCounts
    from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
    from eosflow.runners.summary import RunSummary

    def batch(n: int, *ranges: tuple[int, int, int]) -> RunSummary:
        parts = tuple(PartitionPlan(OffsetRange("t", p, a, b), first_seen=False) for p, a, b in ranges)
        counts = {("t", p): PartitionCounts(b - a, b - a - 1, 1) for p, a, b in ranges if b > a}
        return RunSummary("p", f"p:s_{n}", "committed", Plan(f"p:s_{n}", "p", f"s_{n}", parts), counts)

    status = StreamStatus(run_prefix="stream__x")
    status.committed(batch(1, (0, 0, 10), (1, 5, 5)))  # partition 1: nothing new yet
    status.committed(batch(2, (0, 10, 25), (1, 5, 9)))
    summary = status.summary("p")

    assert (summary.batch_id, summary.outcome, summary.plan.kind) == ("stream__x", "stopped", "stream")
    assert [(r.partition, r.start, r.end) for r in summary.plan.ranges] == [(0, 0, 25), (1, 5, 9)]
    assert summary.counts[("t", 0)] == PartitionCounts(25, 23, 2)
    assert summary.counts[("t", 1)] == PartitionCounts(4, 3, 1)
    assert StreamStatus(run_prefix="stream__y").summary("p").plan.ranges == []
