"""What each Spark task of an Iceberg sink does: its range's checked records as Parquet files.

A task writes the valid rows of its range into the table's data folder, one file per day of the Kafka
timestamp (the table's partition: Iceberg's add_files needs each file inside one partition), and the
rejected rows into one file beside them. Nothing is visible until the run's one Iceberg commit adds
the files (commit.py); a task that dies leaves files no snapshot names, which maintenance removes.
Files are named by batch, topic, partition, day and a random part, so a retried task never overwrites
a file an earlier attempt may have handed over; the batch id and topic enter a name through
names.name_part (every reader opens the file: no `:`), and each file's Parquet metadata holds them whole.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eosflow.faults import fault_point
from eosflow.schema.arrow import valid_columns
from eosflow.sinks.iceberg import storage
from eosflow.sinks.iceberg.catalog import arrow_schema
from eosflow.sinks.iceberg.names import name_part
from eosflow.transform import REJECTED_COLUMNS, BatchCheck

# One row per (topic, partition) a task wrote: what the driver commits.
WRITTEN_SCHEMA = (
    "kafka_topic string, kafka_partition int, n long, written long, rejected long, lo long, hi long, "
    "data_files string, rejected_files string"
)


@dataclass
class Written:
    """A partition's part of the run, summed over the tasks that wrote it."""

    read: int = 0
    written: int = 0
    rejected: int = 0
    lo: int | None = None
    hi: int | None = None
    data_files: list[str] = field(default_factory=list)
    rejected_files: list[str] = field(default_factory=list)

    def add(self, row) -> None:
        self.read += row.n
        self.written += row.written
        self.rejected += row.rejected
        if row.lo is not None:
            self.lo = row.lo if self.lo is None else min(self.lo, row.lo)
            self.hi = row.hi if self.hi is None else max(self.hi, row.hi)
        self.data_files += json.loads(row.data_files)
        self.rejected_files += json.loads(row.rejected_files)


def range_writer(
    location: str, io_properties: Mapping[str, str], batch_id: str, check: BatchCheck, folder: str = "data"
) -> Callable[[Iterator], Iterator]:
    """The function each Spark task runs over its Arrow batches (mapInArrow); `io_properties` make the
    table's FileIO in the task (storage.py: the store's endpoint and credentials, never logged). The valid
    rows go under `folder`: data/ for files the commit adds, eosflow-changes/ for a change stream's
    staged changes (read by the commit, never added)."""
    properties = dict(io_properties)
    valid = arrow_schema(valid_columns(check.schema))
    rejected = pa.schema(REJECTED_COLUMNS)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        filesystem, root = storage.filesystem(properties, location)
        writers = _Writers(filesystem, root, location, batch_id, check.pipeline, folder)
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                checked = check(batch)
                keys = _keys(checked)
                if len(keys) == 1:  # a task reads one range: no filter to pay for
                    writers.add(keys[0], checked, valid, rejected)
                    continue
                for topic, partition in keys:
                    mine = checked.filter(
                        pc.and_(
                            pc.equal(checked.column("kafka_topic"), topic),
                            pc.equal(checked.column("kafka_partition"), partition),
                        )
                    )
                    writers.add((topic, partition), mine, valid, rejected)
        finally:
            writers.close()
        yield pa.RecordBatch.from_pylist(writers.rows(), schema=_ROW_SCHEMA)

    return write


def write_rejected(
    location: str,
    io_properties: Mapping[str, str],
    batch_id: str,
    pipeline: str,
    key: tuple[str, int],
    rows: pa.Table,
) -> str:
    """Rejected rows the driver finds at commit (a change stream's change it cannot apply) as one file of
    the range's, named and described as a task's rejected rows are; its URI, for the range's position."""
    import pyarrow.parquet as pq

    filesystem, root = storage.filesystem(dict(io_properties), location)
    topic, partition = key
    parts = (name_part(batch_id), name_part(topic), partition, "rejected", f"commit{uuid.uuid4().hex[:12]}")
    name = f"eosflow-rejected/{name_part(batch_id)}/{'-'.join(map(str, parts))}.parquet"
    table = rows.select([n for n, _ in REJECTED_COLUMNS]).cast(pa.schema(REJECTED_COLUMNS))
    table = table.replace_schema_metadata(_origin(pipeline, batch_id, key, "rejected"))
    with filesystem.open_output_stream(f"{root.rstrip('/')}/{name}") as stream:
        pq.write_table(table, stream)
    return f"{location.rstrip('/')}/{name}"


def _origin(pipeline: str, batch_id: str, key: tuple[str, int], kind: str) -> dict[str, str]:
    """What a file's name held before names were made safe: the batch, whole, in its metadata."""
    topic, partition = key
    return {
        "eosflow.pipeline": pipeline,
        "eosflow.batch_id": batch_id,
        "eosflow.kafka_topic": topic,
        "eosflow.kafka_partition": str(partition),
        "eosflow.kind": "data" if kind == "data" else "rejected",
    }


_ROW_SCHEMA = pa.schema(
    [
        ("kafka_topic", pa.string()),
        ("kafka_partition", pa.int32()),
        ("n", pa.int64()),
        ("written", pa.int64()),
        ("rejected", pa.int64()),
        ("lo", pa.int64()),
        ("hi", pa.int64()),
        ("data_files", pa.string()),
        ("rejected_files", pa.string()),
    ]
)


def _keys(checked: pa.RecordBatch) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a batch: one, as Spark's Kafka source reads a range per task."""
    import pyarrow.compute as pc

    topic, partition = checked.column("kafka_topic"), checked.column("kafka_partition")
    if pc.count_distinct(topic).as_py() == 1 and pc.count_distinct(partition).as_py() == 1:
        return [(topic[0].as_py(), partition[0].as_py())]
    pairs = pa.Table.from_batches([checked.select(["kafka_topic", "kafka_partition"])])
    unique = pairs.group_by(["kafka_topic", "kafka_partition"]).aggregate([])
    return list(zip(unique.column(0).to_pylist(), unique.column(1).to_pylist(), strict=True))


class _Writers:
    """Open Parquet writers of one task: per (topic, partition) one per day, and one for rejected rows."""

    def __init__(
        self, filesystem, root: str, location: str, batch_id: str, pipeline: str, folder: str = "data"
    ) -> None:
        self.fs, self.root, self.location, self.batch_id = filesystem, root, location, batch_id
        self.pipeline, self.folder = pipeline, folder
        self.batch_part = name_part(batch_id)
        self.open: dict[tuple, Any] = {}  # pq.ParquetWriter (pyarrow has no types)
        self.streams: list = []  # closed after their writers: the upload to an object store ends there
        self.parts: dict[tuple[str, int], dict] = {}
        self.task = uuid.uuid4().hex[:12]

    def add(self, key: tuple[str, int], rows: pa.RecordBatch, valid: pa.Schema, rejected: pa.Schema) -> None:
        import pyarrow.compute as pc

        part = self.parts.setdefault(key, {"n": 0, "written": 0, "rejected": 0, "lo": None, "hi": None,
                                           "data": [], "rejected_files": []})  # fmt: skip
        offsets = rows.column("kafka_offset")
        part["n"] += rows.num_rows
        lo, hi = pc.min(offsets).as_py(), pc.max(offsets).as_py()
        part["lo"] = lo if part["lo"] is None else min(part["lo"], lo)
        part["hi"] = hi if part["hi"] is None else max(part["hi"], hi)
        ok = pc.is_null(rows.column("error"))
        good = rows.filter(ok).select(valid.names).cast(valid)
        bad = rows.filter(pc.invert(ok)).select(rejected.names).cast(rejected)
        part["written"] += good.num_rows
        part["rejected"] += bad.num_rows
        if good.num_rows:
            days = pc.cast(good.column("kafka_timestamp"), pa.date32())
            for day in pc.unique(days).to_pylist():
                chosen = pc.is_null(days) if day is None else pc.fill_null(pc.equal(days, day), False)
                self._writer(key, day, valid, "data").write_batch(good.filter(chosen))
        if bad.num_rows:
            self._writer(key, "rejected", rejected, "rejected_files").write_batch(bad)

    def _writer(self, key: tuple[str, int], day, schema: pa.Schema, kind: str):
        import pyarrow.parquet as pq

        slot = (key, day)
        if slot not in self.open:
            topic, partition = key
            folder = self.folder if kind == "data" else f"eosflow-rejected/{self.batch_part}"
            parts = (self.batch_part, name_part(topic), partition, day or "none", self.task)
            name = f"{folder}/{'-'.join(map(str, parts))}.parquet"
            path = f"{self.root.rstrip('/')}/{name}"
            # The table's FileIO's filesystem: a local one makes the folders, an object store needs none.
            stream = self.fs.open_output_stream(path)
            self.streams.append(stream)
            writer = pq.ParquetWriter(stream, schema)
            writer.add_key_value_metadata(self._origin(key, kind))
            self.open[slot] = writer
            self.parts[key][kind].append(f"{self.location.rstrip('/')}/{name}")
        return self.open[slot]

    def _origin(self, key: tuple[str, int], kind: str) -> dict[str, str]:
        return _origin(self.pipeline, self.batch_id, key, kind)

    def close(self) -> None:
        for writer in self.open.values():
            writer.close()
        if self.streams:
            fault_point("in_file_upload")  # the files' bytes sent, their uploads not completed
        for stream in self.streams:
            stream.close()

    def rows(self) -> list[dict]:
        return [
            {
                "kafka_topic": t,
                "kafka_partition": p,
                "n": part["n"],
                "written": part["written"],
                "rejected": part["rejected"],
                "lo": part["lo"],
                "hi": part["hi"],
                "data_files": json.dumps(part["data"]),
                "rejected_files": json.dumps(part["rejected_files"]),
            }
            for (t, p), part in self.parts.items()
        ]
