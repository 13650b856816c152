"""One measurement's outcome, and the CSV form the results folder keeps."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

# Measurement keys (the --only names), in the order a run takes them, with their labels.
MEASUREMENTS: dict[str, str] = {
    "read-ceiling": "Read ceiling: Kafka ConsumerPerformance",
    "write-ceiling": "Write ceiling: Postgres COPY",
    "write-ceiling-2": "Write ceiling: Postgres COPY, 2 writers",
    "eosflow": "eosflow ingest, end to end",
    "iceberg": "eosflow ingest into an Iceberg table (sink: iceberg), end to end",
    "read-check": "Floor for any sink: eosflow's read and check through Spark, nothing written",
    "overhead": "eosflow fixed overhead (1 record)",
    "overhead-spark": "eosflow fixed overhead through Spark (1 record, EOSFLOW_INLINE_MAX_OFFSETS=0)",
    "eosflow-warm": "eosflow ingest through a warm Spark (the stack's Spark Connect server), end to end",
    "overhead-warm": "eosflow fixed overhead through a warm Spark (1 record, Spark Connect, no inline read)",
    "handwritten": "executemany loop (confluent-kafka, at-least-once)",
    "competent": "Competent loop (assign, msgspec checks, COPY + positions in one transaction)",
    "streaming": "Structured Streaming (AvailableNow, foreachBatch JDBC)",
}
# The change-stream workload's (`--changes`, issue 44; eosflow_dev.bench.change_suite), run apart from those.
CHANGE_MEASUREMENTS: dict[str, str] = {
    "eosflow-changes": "eosflow ingest, changes: debezium (changelog + state table), end to end",
    "merge-loop": "Merge loop (assign, msgspec, COPY + reduce + DELETE + upsert + positions per transaction)",
    "eosflow-append": "eosflow ingest, the same columns appended (no changes:), end to end",
}
OVERHEADS = (
    "overhead",
    "overhead-spark",
    "overhead-warm",
)  # 1-record runs: beside the table, not in its ratios
# fill a table with the loaded rows
WRITERS = (
    "write-ceiling",
    "write-ceiling-2",
    "eosflow",
    "eosflow-warm",
    "handwritten",
    "competent",
    "streaming",
)

CSV_FIELDS = (
    "run_id",
    "measurement",
    "label",
    "partitions",
    "loaded_records",
    "records",
    "payload_mb",
    "seconds",
    "records_per_s",
    "mb_per_s",
    "wall_s",
    "peak_rss_mib",
    "peak_jvm_rss_mib",
    "eosflow_ratio",
    "rows_checked",
    "fingerprint",
    "timed",
    "detail",
)


@dataclass
class Result:
    run_id: str
    measurement: str  # a MEASUREMENTS key
    partitions: int
    loaded: int  # records loaded into the run's topic: the cell this result belongs to
    records: int  # records this measurement moved (read, or found in its table afterwards)
    payload_bytes: int  # their keys + values
    seconds: float  # the timed section, see `timed`
    wall_s: float  # its whole process, start to exit
    peak_rss_mib: float  # the process tree (driver + JVM), sampled every 100 ms
    peak_jvm_rss_mib: float
    timed: str  # what `seconds` covers, in words
    rows_checked: int | None = None  # rows counted in its target table afterwards (writers only)
    fingerprint: str = ""  # the target table's digest (writers only); equal digests, equal rows
    detail: dict[str, float] = field(default_factory=dict)  # its own timings (eosflow: its phases)

    @property
    def label(self) -> str:
        labels = MEASUREMENTS | CHANGE_MEASUREMENTS
        return labels.get(self.measurement, self.measurement)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def as_row(self, eosflow_ratio: float | None) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "measurement": self.measurement,
            "label": self.label,
            "partitions": self.partitions,
            "loaded_records": self.loaded,
            "records": self.records,
            "payload_mb": round(self.payload_bytes / 1e6, 3),
            "seconds": round(self.seconds, 3),
            "records_per_s": round(self.records_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 3),
            "wall_s": round(self.wall_s, 3),
            "peak_rss_mib": round(self.peak_rss_mib, 1),
            "peak_jvm_rss_mib": round(self.peak_jvm_rss_mib, 1),
            "eosflow_ratio": "" if eosflow_ratio is None else round(eosflow_ratio, 3),
            "rows_checked": "" if self.rows_checked is None else self.rows_checked,
            "fingerprint": self.fingerprint,
            "timed": self.timed,
            "detail": json.dumps({k: round(v, 3) for k, v in self.detail.items()}),
        }

    @classmethod
    def from_row(cls, row: dict[str, str]) -> Result:
        return cls(
            run_id=row["run_id"],
            measurement=row["measurement"],
            partitions=int(row["partitions"]),
            loaded=int(row["loaded_records"]),
            records=int(row["records"]),
            payload_bytes=int(round(float(row["payload_mb"]) * 1e6)),
            seconds=float(row["seconds"]),
            wall_s=float(row["wall_s"]),
            peak_rss_mib=float(row["peak_rss_mib"]),
            peak_jvm_rss_mib=float(row["peak_jvm_rss_mib"]),
            timed=row["timed"],
            rows_checked=int(row["rows_checked"]) if row["rows_checked"] else None,
            fingerprint=row["fingerprint"],
            detail=json.loads(row["detail"] or "{}"),
        )


def eosflow_ratio(result: Result, cell: list[Result]) -> float | None:
    """eosflow's records/s over this measurement's, in the same cell (same topic); > 1: eosflow is faster."""
    eos = next((r for r in cell if r.measurement == "eosflow"), None)
    if eos is None or result.measurement in ("eosflow", *OVERHEADS) or result.records_per_s == 0:
        return None
    return eos.records_per_s / result.records_per_s


def cells(results: list[Result]) -> dict[tuple[int, int], list[Result]]:
    """Results grouped by (partitions, loaded records): one topic each."""
    out: dict[tuple[int, int], list[Result]] = {}
    for r in results:
        out.setdefault((r.partitions, r.loaded), []).append(r)
    return out


def write_csv(path: Path, results: list[Result]) -> Path:
    groups = cells(results)
    with path.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        out.writeheader()
        for cell in groups.values():
            for r in cell:
                out.writerow(r.as_row(eosflow_ratio(r, cell)))
    return path


def read_csv(path: Path) -> list[Result]:
    with path.open(newline="") as fh:
        return [Result.from_row(row) for row in csv.DictReader(fh)]
