"""eosflow's own job, run as a user runs it: `eosflow ingest --pipeline P`, a black box in a process.

Each run gets a pipelines file of its own with a fresh pipeline name and target table, so nothing is
committed yet and the run reads the whole topic from the earliest offset in one batch. The job's
summary (eosflow.runners.summary) says what it committed and how long each step took; the bench
reads both from its output.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from eosflow import pipelines
from eosflow_dev.stack import settings as settings_mod

OUTCOME_OK = ("COMMITTED", "ALREADY COMMITTED")
ORDERS = "orders"  # the declaration every measurement but the change-stream bench's reads
_TIME = re.compile(r"^\s*time: (?P<phases>.*) \(total [0-9.]+s")
_OUTCOME = re.compile(r"outcome: (?P<outcome>[A-Z_ ]+?)(\s{2}|$)")
_TOTAL = re.compile(r"^\s*total\s+(?P<read>[\d,]+)\s+(?P<written>[\d,]+)\s+(?P<rejected>[\d,]+)\s*$")


class SummaryParseError(RuntimeError):
    """eosflow's output did not hold the run summary the bench expects."""


@dataclass(frozen=True)
class IngestSummary:
    outcome: str
    read: int
    written: int
    rejected: int
    phases: dict[str, float]  # the job's own step timings, in its order


def write_pipelines_file(
    path: Path,
    pipeline: str,
    topic: str,
    target_table: str,
    max_records: int,
    sink: dict | None = None,
    declaration: dict | None = None,
) -> Path:
    """One pipeline reading all of `topic` in a single run.

    The planner caps a range in offsets, not records, and transaction markers take offsets too: a
    cap of `max_records` cut a one-partition topic of 1M records in transactions of 1,000 at
    999,001 records. Every record plus at most one marker each always fits under twice as many.
    `sink`: another sink's keys instead of `target_table` (the Iceberg measurement's); `declaration`:
    the columns (and changes:) instead of the orders declaration (the change-stream bench's).
    """
    body = {
        "pipelines": {
            pipeline: {
                "topics": [topic],
                **(sink or {"target_table": target_table}),
                **(declaration or pipelines.declaration(settings_mod.load().root / "pipelines.yml", ORDERS)),
                "transform_version": "v1",
                "initial_offset": "earliest",
                "max_records_per_partition": 2 * max(max_records, 1),
                "max_value_bytes": 65536,
            }
        }
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def ingest_cmd(pipeline: str) -> list[str]:
    """The installed `eosflow` next to this Python, else the module (same code either way)."""
    script = Path(sys.executable).with_name("eosflow")
    if script.exists():
        return [str(script), "ingest", "--pipeline", pipeline]
    return [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", pipeline]


def ingest_env(pipelines_file: Path) -> dict[str, str]:
    return os.environ | {"EOSFLOW_PIPELINES": str(pipelines_file)}


def parse_summary(stdout: str) -> IngestSummary:
    """Outcome, totals and phase timings from `RunSummary.table()` as the job prints it."""
    outcome = totals = None
    phases: dict[str, float] = {}
    for line in stdout.splitlines():
        if outcome is None and (m := _OUTCOME.search(line)):
            outcome = m["outcome"].strip()
        elif m := _TOTAL.match(line):
            totals = tuple(int(m[k].replace(",", "")) for k in ("read", "written", "rejected"))
        elif m := _TIME.match(line):
            for item in m["phases"].split(", "):
                name, _, seconds = item.rpartition(" ")
                if name and seconds.endswith("s"):
                    phases[name] = float(seconds[:-1])
    if outcome is None:
        raise SummaryParseError(f"no 'outcome:' in eosflow ingest's output:\n{stdout[-2000:]}")
    read, written, rejected = totals or (0, 0, 0)
    return IngestSummary(outcome, read, written, rejected, phases)
