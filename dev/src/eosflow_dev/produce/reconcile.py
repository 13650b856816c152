"""Compare a producer manifest with what a consumer really read from the topic."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from eosflow_dev.produce.manifest import Manifest
from eosflow_dev.produce.readback import ReadRecord


@dataclass(frozen=True)
class Reconciliation:
    expected: int  # visible events in the manifest
    found: int  # of those, read at least once
    missing: list[str]  # visible in the manifest, never read
    duplicated: list[str]  # this run's events read more than once
    leaked: list[str]  # aborted or fenced events that the reader saw
    misplaced: list[str]  # read at another partition/offset than the manifest says

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.leaked or self.misplaced)

    def describe(self) -> str:
        head = f"{self.found:,}/{self.expected:,} visible events read"
        problems = [
            f"{len(v):,} {k}"
            for k, v in (
                ("missing", self.missing),
                ("duplicated", self.duplicated),
                ("leaked", self.leaked),
                ("misplaced", self.misplaced),
            )
            if v
        ]
        return head + ("; " + ", ".join(problems) if problems else "; nothing missing, duplicated or leaked")


def reconcile(manifest: Manifest, records: list[ReadRecord]) -> Reconciliation:
    """Only this manifest's events are judged, so a topic holding earlier runs reconciles too."""
    ours = {row.event_id: row for row in manifest.rows}
    seen = Counter(r.event_id for r in records if r.event_id in ours)
    where = {r.event_id: (r.partition, r.offset) for r in records if r.event_id in ours}
    visible = [row for row in manifest.visible()]
    hidden = [row for row in manifest.rows if row.status in ("aborted", "fenced")]
    return Reconciliation(
        expected=len(visible),
        found=sum(1 for row in visible if seen[row.event_id]),
        missing=[row.event_id for row in visible if not seen[row.event_id]],
        duplicated=[eid for eid, n in seen.items() if n > 1],
        leaked=[row.event_id for row in hidden if seen[row.event_id]],
        misplaced=[
            row.event_id
            for row in visible
            if row.event_id in where and where[row.event_id] != (row.partition, row.offset)
        ],
    )
