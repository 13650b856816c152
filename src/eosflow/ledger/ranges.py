"""The immutable offset-range value and the plan that groups them.

An offset range is (topic, partition, start, end): start inclusive, end exclusive. Offsets inside
a range are not contiguous on transactional topics (commit markers and aborted records leave
holes), so a range bounds offsets, and the number of records in it is at most end - start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.partition < 0 or self.start < 0 or self.end < self.start:
            raise ValueError(f"not an offset range: {self}")

    @property
    def span(self) -> int:
        """Upper bound of the records inside (holes make the real count smaller)."""
        return self.end - self.start

    @property
    def empty(self) -> bool:
        return self.start == self.end

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] [{self.start}, {self.end})"

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> OffsetRange:
        return cls(body["topic"], int(body["partition"]), int(body["start"]), int(body["end"]))


@dataclass(frozen=True)
class PartitionPlan:
    """What one partition contributes to a run."""

    range: OffsetRange
    first_seen: bool  # no position stored before: the run establishes one
    lost: OffsetRange | None = None  # acknowledged data loss just before range.start
    lag_after: int = 0  # records (offsets) still left after range.end at planning time
    topic_id: str | None = None  # Kafka's id of the topic when planned: the commit refuses another
    replays: int | None = None  # a replay: the partition's committed replays when planned (fencing)

    def to_json(self) -> dict[str, Any]:
        return {
            "range": self.range.to_json(),
            "first_seen": self.first_seen,
            "lost": self.lost.to_json() if self.lost else None,
            "lag_after": self.lag_after,
            "topic_id": self.topic_id,
            "replays": self.replays,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> PartitionPlan:
        lost = OffsetRange.from_json(body["lost"]) if body.get("lost") else None
        return cls(
            OffsetRange.from_json(body["range"]),
            bool(body["first_seen"]),
            lost,
            int(body.get("lag_after", 0)),
            body.get("topic_id"),
            body.get("replays"),
        )


PLAN_KINDS = ("ingest", "catch-up", "replay")


@dataclass(frozen=True)
class Plan:
    batch_id: str
    pipeline: str
    run_id: str
    partitions: tuple[PartitionPlan, ...] = field(default_factory=tuple)
    kind: str = "ingest"  # see PLAN_KINDS: only a replay leaves positions where they are
    declaration_version: int | None = None  # the pipeline's declaration its records are checked with

    @property
    def ranges(self) -> list[OffsetRange]:
        return [p.range for p in self.partitions]

    @property
    def nonempty(self) -> list[OffsetRange]:
        return [r for r in self.ranges if not r.empty]

    def to_json(self) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.partitions]


def batch_id_for(
    pipeline: str, run_id: str, explicit: OffsetRange | None = None, kind: str = "ingest"
) -> str:
    """Stable per run, and per chunk for backfills, so a retried chunk finds its own commit."""
    if explicit is None:
        return f"{pipeline}:{run_id}"
    return f"{pipeline}:{run_id}:{kind}:{explicit.topic}:{explicit.partition}:{explicit.start}-{explicit.end}"
