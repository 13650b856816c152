"""The run summary: what a run read and committed, per partition, as a task log shows it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import psycopg

from eosflow.ledger.positions import PartitionCounts
from eosflow.ledger.ranges import PartitionPlan, Plan

_NUM = 12  # wide enough for offsets and counts in the hundreds of millions, with separators


@dataclass
class RunSummary:
    pipeline: str
    batch_id: str
    outcome: str = "failed"
    plan: Plan | None = None
    counts: Mapping[tuple[str, int], PartitionCounts] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step
    within: dict[str, float] = field(default_factory=dict)  # seconds of parts of a step (not in the total)
    reused_plan: bool = False

    @property
    def records_read(self) -> int:
        return sum(c.read for c in self.counts.values())

    def table(self) -> str:
        reused = "  (plan reused from an earlier attempt)" if self.reused_plan else ""
        lines = [f"pipeline {self.pipeline}  batch {self.batch_id}  outcome: {self.outcome.upper()}{reused}"]
        if self.plan is not None:
            heads = ("start", "end", "read", "written", "rejected", "lag")
            lines.append(f"  {'partition':<24}" + "".join(f"{h:>{_NUM}}" for h in heads))
            for part in self.plan.partitions:
                lines.append(self._row(part))
            totals = [
                sum(getattr(c, f) for c in self.counts.values()) for f in ("read", "written", "rejected")
            ]
            lines.append(f"  {'total':<24}{'':>{2 * _NUM}}" + "".join(f"{n:>{_NUM},}" for n in totals))
        if self.phases:
            spent = sum(self.phases.values())
            rate = f"; {self.records_read / spent:,.0f} records/s" if spent and self.records_read else ""
            lines.append(
                "  time: "
                + ", ".join(f"{k} {v:.2f}s" for k, v in self.phases.items())
                + f" (total {spent:.1f}s{rate})"
                + "".join(f"; of it {k} {v:.2f}s" for k, v in self.within.items())
            )
        return "\n".join(lines)

    def _row(self, part: PartitionPlan) -> str:
        r = part.range
        c = self.counts.get((r.topic, r.partition))
        counts = (c.read, c.written, c.rejected) if c else ("-", "-", "-")
        cells = [f"{v:>{_NUM},}" if isinstance(v, int) else f"{v:>{_NUM}}" for v in (r.start, r.end, *counts)]
        note = f"  lost [{part.lost.start}, {part.lost.end})" if part.lost else ""
        note += "  (first range)" if part.first_seen else ""
        return f"  {f'{r.topic}[{r.partition}]':<24}{''.join(cells)}{part.lag_after:>{_NUM},}{note}"


def recorded(conn: psycopg.Connection, pipeline: str, batch_id: str) -> RunSummary | None:
    """A batch's summary as the ledger holds it (for a process that did not run it: Airflow's lineage of a
    Spark task that ran in spark-submit's); None when it was never planned."""
    from eosflow.ledger import positions, store

    loaded = store.load_plan(conn, batch_id)
    if loaded is None:
        return None
    plan, status = loaded
    counts = {key: PartitionCounts(*c) for key, c in store.committed_counts(conn, batch_id).items()}
    outcome = positions.COMMITTED if status == "committed" else status
    return RunSummary(pipeline, batch_id, outcome, plan, counts)
