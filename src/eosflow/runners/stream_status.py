"""What a running stream reports: records per second, lag per partition, and the latency from each
record's Kafka timestamp to the commit that made it visible, as p50/p95/p99 over a window of batches.

Pure: the stream loop feeds it each batch's figures; nothing here touches Kafka or Postgres.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from eosflow.ledger.positions import PartitionCounts
from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
from eosflow.runners.summary import RunSummary


def percentiles(values: list[float], quantiles: tuple[float, ...] = (0.5, 0.95, 0.99)) -> tuple[float, ...]:
    """Nearest-rank percentiles (each one a value that occurred); empty in, empty out."""
    if not values:
        return ()
    ordered = sorted(values)
    last = len(ordered) - 1
    return tuple(ordered[min(last, max(0, math.ceil(q * len(ordered)) - 1))] for q in quantiles)


@dataclass(frozen=True)
class BatchFigures:
    batch_id: str
    outcome: str  # committed, fenced, idle, ...
    records: int  # read in the batch
    seconds: float  # wall clock since the previous batch ended: its work and any wait before it
    lag: dict[str, int]  # "topic[partition]" -> offsets left after the batch's range, at planning
    latencies: tuple[float, ...] = ()  # seconds, Kafka timestamp to commit, one per committed record


@dataclass
class StreamStatus:
    """A window of the last `window` batches, plus totals since the stream started."""

    window: int = 10
    batches: deque[BatchFigures] = field(default_factory=deque)
    total_batches: int = 0
    total_records: int = 0
    fenced: int = 0
    idle: int = 0
    run_prefix: str = ""  # its batches' run ids are <prefix>_<n>
    # (topic, partition) -> [first start, last end, read, written, rejected] of the committed batches:
    # the stream's lineage in summary (one OpenLineage run, not one per micro-batch)
    spans: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    def committed(self, summary: RunSummary) -> None:
        """A batch that committed: its ranges and counts into the stream's spans."""
        for r in summary.plan.nonempty if summary.plan is not None else []:
            c = summary.counts.get((r.topic, r.partition)) or PartitionCounts(0)
            span = self.spans.setdefault((r.topic, r.partition), [r.start, r.end, 0, 0, 0])
            span[0], span[1] = min(span[0], r.start), max(span[1], r.end)
            span[2] += c.read
            span[3] += c.written
            span[4] += c.rejected

    def summary(self, pipeline: str) -> RunSummary:
        """The stream as one run: each partition from its first committed offset to its last, counted."""
        parts = tuple(
            PartitionPlan(OffsetRange(topic, partition, start, end), first_seen=False)
            for (topic, partition), (start, end, *_) in sorted(self.spans.items())
        )
        counts = {key: PartitionCounts(*span[2:]) for key, span in self.spans.items()}
        plan = Plan(self.run_prefix, pipeline, self.run_prefix, parts, kind="stream")
        return RunSummary(pipeline, self.run_prefix, "stopped", plan, counts)

    def add(self, figures: BatchFigures) -> None:
        self.batches.append(figures)
        while len(self.batches) > self.window:
            self.batches.popleft()
        self.total_batches += 1
        self.total_records += figures.records
        self.fenced += figures.outcome == "fenced"
        self.idle += figures.outcome == "idle"

    def latency(self) -> tuple[float, ...]:
        return percentiles([v for b in self.batches for v in b.latencies])

    def line(self) -> str:
        records = sum(b.records for b in self.batches)
        seconds = sum(b.seconds for b in self.batches)
        rate = records / seconds if seconds else 0.0
        lag = self.batches[-1].lag if self.batches else {}
        p = self.latency()
        latency = f"p50 {p[0]:.2f}s p95 {p[1]:.2f}s p99 {p[2]:.2f}s" if p else "no records"
        caught_up = "0 (caught up)" if self.batches and self.batches[-1].outcome == "idle" else "-"
        lags = ", ".join(f"{k} {v:,}" for k, v in sorted(lag.items())) or caught_up
        return (
            f"batches {self.total_batches:,} (fenced {self.fenced}, idle {self.idle}); "
            f"last {len(self.batches)}: {records:,} records, {rate:,.0f} records/s; "
            f"latency {latency}; lag {lags}"
        )


def first_line(exc: BaseException) -> str:
    """An error's first line, at most 300 characters: what a stream's log line quotes of it."""
    return (str(exc).strip().splitlines() or [""])[0][:300]
