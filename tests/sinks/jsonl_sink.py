"""A sink of JSON-lines files in a folder, as a package of a user's would add one: the proof that
eosflow's sink protocol (eosflow.sinks.protocol) holds. Nothing in eosflow names it.

The tests install this file as a distribution of its own (`eosflow_jsonl_sink`, with an `eosflow.sinks`
entry point named `jsonl`; tests/sinks/plugin.py), and a pipeline declares it with `sink: jsonl` and
`jsonl_folder: /abs/path`. Its truth is the folder. The Spark task that reads a range writes the
range's rows and rejected records to files of their own, then commits them by creating the range's
marker exclusively, named by the position the range starts from: of two runs planned from one position
only one can commit (the other is fenced), and a marker holds the batch id, the range and its counts.
The warehouse ledger mirrors the markers (eosflow.ledger.mirror) and reconciles what a crash between the
two left. Files no marker names are an attempt's leftovers: never read.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psycopg

from eosflow.errors import PipelineConfigError
from eosflow.faults import fault_point
from eosflow.ledger import mirror
from eosflow.ledger.positions import ALREADY_COMMITTED, COMMITTED, expected_position
from eosflow.ledger.ranges import PartitionPlan, Plan
from eosflow.sinks.protocol import Sink

_OUTCOMES = "kafka_topic string, kafka_partition int, outcome string, n long, written long, rejected long"


@dataclass(frozen=True)
class JsonLinesSink(Sink):
    kind: ClassVar[str] = "jsonl"
    keys: ClassVar[frozenset[str]] = frozenset({"jsonl_folder"})
    truth: ClassVar[str] = "the folder's range markers"
    task_modules: ClassVar[tuple[str, ...]] = (__name__,)

    folder: str

    @classmethod
    def declare(cls, spec: Mapping[str, Any], schema, where: str) -> JsonLinesSink:
        folder = spec.get("jsonl_folder")
        if not isinstance(folder, str) or not os.path.isabs(folder):
            raise PipelineConfigError(f"{where}: jsonl_folder {folder!r} must be an absolute path")
        return cls(folder)

    @property
    def output(self) -> str:
        return f"folder {self.folder}"

    def output_uri(self, settings) -> str:
        return f"file://{self.folder}"

    def prepare(self, conn: psycopg.Connection, settings, pipeline, log) -> None:
        Path(self.folder).mkdir(parents=True, exist_ok=True)
        mirror.reconcile(conn, pipeline.name, pipeline.topics, self._committed, self.output, log)

    def write(self, conn: psycopg.Connection, run) -> dict:
        plan = run.plan
        outcomes = {}
        if plan.nonempty:
            run.check_topics_unchanged()
            with run.read("read+transform+write") as result:
                writer = _range_writer(self.folder, plan, result.check)
                rows = result.map_records(writer, _OUTCOMES).collect()
            outcomes = {
                (r.kafka_topic, r.kafka_partition): mirror.RangeOutcome(
                    r.kafka_topic, r.kafka_partition, r.outcome, r.n, r.written, r.rejected
                )
                for r in rows
            }
        for part in plan.partitions:  # ranges no task saw: first ranges, losses, only aborted records
            key = (part.range.topic, part.range.partition)
            if key not in outcomes and (not part.range.empty or part.first_seen or part.lost is not None):
                outcomes[key] = commit_range(self.folder, plan.batch_id, part, [], [], 0)
        run.log(f"wrote {sum(o.written for o in outcomes.values()):,} rows to {self.folder}")
        return outcomes

    def commit(self, conn: psycopg.Connection, run, written):
        fault_point("in_commit")  # committed in the folder, not yet mirrored in the ledger
        with run.time("ledger mirror"):
            return mirror.mirror(conn, run.plan, written, self.output)

    def verify(self, settings, pipeline, marts: bool) -> JsonLinesVerdict:
        with psycopg.connect(settings.warehouse_dsn) as conn:
            ledger = {
                (t, p, s, e): (n, w, r)
                for t, p, s, e, n, w, r in conn.execute(
                    "select topic, partition, start_offset, end_offset, records_read, rows_written, "
                    "rows_rejected from eosflow.ledger where pipeline = %s and kind = 'data'",
                    (pipeline.name,),
                )
            }
        markers = [m for d in _partition_dirs(self.folder) for m in _markers(d)]
        in_markers = {
            (m["topic"], m["partition"], m["start"], m["end"]): (m["read"], m["written"], m["rejected"])
            for m in markers
        }
        rows, wrong_place = [], 0
        for m in markers:
            for line in _lines(Path(self.folder) / m["rows_file"]):
                row = json.loads(line)
                rows.append((row["kafka_topic"], row["kafka_partition"], row["kafka_offset"]))
                wrong_place += not m["start"] <= row["kafka_offset"] < m["end"]
        counted = {k: len(_lines(Path(self.folder) / m["rows_file"])) for k, m in _by_range(markers).items()}
        files_agree = all(counted[k] == counts[1] for k, counts in in_markers.items())
        return JsonLinesVerdict(
            pipeline.name,
            (
                ("every ledger range has its marker, same counts", ledger.items() <= in_markers.items()),
                ("every marker is in the ledger", in_markers.keys() <= ledger.keys()),
                ("the files hold the rows the markers count", files_agree),
                ("no source record twice", len(rows) == len(set(rows))),
                ("every row inside its range", wrong_place == 0),
            ),
        )

    def _committed(self, topic: str, partitions: list[int]) -> dict[int, mirror.SinkCommitted]:
        found = {}
        for partition in partitions:
            markers = _markers(Path(self.folder) / f"{topic}-{partition}")
            if markers:
                m = markers[-1]
                found[partition] = mirror.SinkCommitted(
                    m["end"], m["batch"], m["read"], m["written"], m["rejected"]
                )
        return found


@dataclass(frozen=True)
class JsonLinesVerdict:
    pipeline: str
    checks: tuple[tuple[str, bool], ...]
    returncode: int = 0

    @property
    def ok(self) -> bool:
        return all(ok for _, ok in self.checks)

    def table(self) -> str:
        head = f"jsonl verify of pipeline {self.pipeline}: {'ok' if self.ok else 'FAILED'}"
        return "\n".join([head, *(f"  {name:<50} {'ok' if ok else 'FAILED'}" for name, ok in self.checks)])

    def check_rows(self) -> list[tuple]:
        return [(n, None, "pass" if ok else "fail", 0 if ok else 1, "[]", None) for n, ok in self.checks]


def _range_writer(folder: str, plan: Plan, check):
    """What each Spark task runs over the Arrow batches of its one planned range."""
    parts = {(p.range.topic, p.range.partition): p for p in plan.partitions}
    names = [c.name for c in check.schema.columns]
    batch_id = plan.batch_id

    def write(batches: Iterator) -> Iterator:
        import pyarrow as pa

        key, good, bad, read = None, [], [], 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if key is None:
                key = (batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
            results, _, _ = check.records(batch)
            offsets = batch.column("offset").to_pylist()
            for offset, (error, typed) in zip(offsets, results, strict=True):
                coordinates = {"kafka_topic": key[0], "kafka_partition": key[1], "kafka_offset": offset}
                if error is None:
                    good.append(json.dumps(coordinates | dict(zip(names, typed, strict=True)), default=str))
                else:
                    bad.append(json.dumps(coordinates | {"error": error}))
            read += len(offsets)
        outcomes = [commit_range(folder, batch_id, parts[key], good, bad, read)] if key else []
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "kafka_topic": o.topic,
                    "kafka_partition": o.partition,
                    "outcome": o.outcome,
                    "n": o.read,
                    "written": o.written,
                    "rejected": o.rejected,
                }
                for o in outcomes
            ],
            schema=pa.schema(
                [
                    ("kafka_topic", pa.string()),
                    ("kafka_partition", pa.int32()),
                    ("outcome", pa.string()),
                    ("n", pa.int64()),
                    ("written", pa.int64()),
                    ("rejected", pa.int64()),
                ]
            ),
        )

    return write


def commit_range(
    folder: str, batch_id: str, part: PartitionPlan, good: list[str], bad: list[str], read: int
) -> mirror.RangeOutcome:
    """Write one range's files, then commit them by creating its marker, exclusively."""
    r = part.range
    directory = Path(folder) / f"{r.topic}-{r.partition}"
    directory.mkdir(parents=True, exist_ok=True)
    expected = expected_position(part)
    marker = directory / f"{'first' if expected is None else f'{expected:020d}'}.commit.json"
    if marker.exists():
        done = json.loads(marker.read_text())
        if done["batch"] == batch_id and done["end"] == r.end:
            return mirror.RangeOutcome(
                r.topic, r.partition, ALREADY_COMMITTED, done["read"], done["written"], done["rejected"]
            )
        return _fenced(r, expected, done)
    position = _markers(directory)[-1]["end"] if _markers(directory) else None
    if position != expected:
        return _fenced(r, expected, {"end": position, "batch": None})
    stem = f"{r.start:020d}-{r.end:020d}.{uuid.uuid4().hex[:8]}"
    files = {
        "rows_file": f"{directory.name}/{stem}.jsonl",
        "rejected_file": f"{directory.name}/{stem}.rejected.jsonl",
    }
    for kind, lines in (("rows_file", good), ("rejected_file", bad)):
        (Path(folder) / files[kind]).write_text("".join(line + "\n" for line in lines))
    body = {
        "batch": batch_id,
        "topic": r.topic,
        "partition": r.partition,
        "start": r.start,
        "end": r.end,
        "read": read,
        "written": len(good),
        "rejected": len(bad),
        **files,
    }
    try:
        with open(marker, "x") as fh:  # the commit: exclusive, so one of two runs from here wins
            fh.write(json.dumps(body))
    except FileExistsError:
        return _fenced(r, expected, json.loads(marker.read_text()))
    return mirror.RangeOutcome(r.topic, r.partition, COMMITTED, read, len(good), len(bad))


def _fenced(r, expected, found: dict) -> mirror.RangeOutcome:
    detail = f"{r.topic}[{r.partition}] planned from {expected}, the folder is at {found['end']}"
    return mirror.RangeOutcome(r.topic, r.partition, mirror.FENCED, detail=detail)


def _partition_dirs(folder: str) -> list[Path]:
    return sorted(p for p in Path(folder).iterdir() if p.is_dir()) if Path(folder).is_dir() else []


def _markers(directory: Path) -> list[dict]:
    """The committed ranges of one partition, in order."""
    if not directory.is_dir():
        return []
    markers = [json.loads(p.read_text()) for p in directory.glob("*.commit.json")]
    return sorted(markers, key=lambda m: m["end"])


def _by_range(markers: list[dict]) -> dict[tuple, dict]:
    return {(m["topic"], m["partition"], m["start"], m["end"]): m for m in markers}


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line]


@dataclass(frozen=True)
class JsonLinesFlakyLatencySink(JsonLinesSink):
    """The same sink, whose latency read-back fails as a Postgres blip would (a stream must go on)."""

    kind: ClassVar[str] = "jsonl_flaky_latency"

    def latencies(self, settings, pipeline, plan: Plan, committed_at: float) -> tuple[float, ...]:
        raise psycopg.OperationalError("server closed the connection unexpectedly (a stand-in blip)")
