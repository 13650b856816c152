"""What a producer run wrote, record by record, so later checks can reconcile against it.

Two files: `<name>.json`, a summary (settings, counts by status, per-partition counts), and
`<name>.events.csv`, one row per event: event_id, partition, offset, status, txn.
Statuses: committed (in a committed transaction), aborted (in an aborted one), fenced (in a
transaction cut short because another producer took over the transactional.id), acknowledged
(non-transactional, acked by the broker under the chosen acks), sent (acks=0: the broker never
confirms), failed (delivery error). A read_committed reader sees exactly committed + acknowledged
(+ whatever of `sent` arrived).
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VISIBLE = ("committed", "acknowledged")
STATUSES = ("committed", "aborted", "fenced", "acknowledged", "sent", "failed")


@dataclass(slots=True)
class EventRow:
    event_id: str
    partition: int
    offset: int
    status: str
    txn: int  # transaction number within the run, -1 without transactions


@dataclass
class Manifest:
    topic: str
    settings: dict[str, Any]
    rows: list[EventRow] = field(default_factory=list)
    summary_extra: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        found = Counter(r.status for r in self.rows)
        return {status: found.get(status, 0) for status in STATUSES}

    def visible(self) -> list[EventRow]:
        return [r for r in self.rows if r.status in VISIBLE]

    def per_partition(self) -> dict[int, int]:
        """Visible records per partition."""
        return dict(sorted(Counter(r.partition for r in self.visible()).items()))

    def summary(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "settings": self.settings,
            "records": len(self.rows),
            "counts": self.counts(),
            "visible_per_partition": {str(k): v for k, v in self.per_partition().items()},
            **self.summary_extra,
        }

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        events_path = events_file(path)
        with events_path.open("w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(["event_id", "partition", "offset", "status", "txn"])
            out.writerows((r.event_id, r.partition, r.offset, r.status, r.txn) for r in self.rows)
        body = self.summary() | {"events_file": events_path.name}
        path.write_text(json.dumps(body, indent=2) + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> Manifest:
        body = json.loads(path.read_text())
        with (path.parent / body["events_file"]).open(newline="") as fh:
            rows = [
                EventRow(r["event_id"], int(r["partition"]), int(r["offset"]), r["status"], int(r["txn"]))
                for r in csv.DictReader(fh)
            ]
        known = {"topic", "settings", "records", "counts", "visible_per_partition", "events_file"}
        return cls(body["topic"], body["settings"], rows, {k: v for k, v in body.items() if k not in known})


def events_file(path: Path) -> Path:
    return path.with_name(path.stem + ".events.csv")
