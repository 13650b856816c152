"""Step 4: the batch's output and rejected rows into staging by COPY, in the same pass as the read.

Each Spark task reads its planned range and hands it to Python as Arrow batches; the task checks
every record (eosflow.ingest.transform.BatchCheck), formats the valid rows in the target's columns
and the rejected ones in staging.rejected's as CSV, and streams both to Postgres with
`COPY FROM STDIN` while it reads: the batch goes through Spark once, never through the driver, and
Postgres parses it while the task checks the next rows. Each task also counts what it read per
partition (records, lowest and highest offset), so the count the commit checks staging against
comes from the same pass, not from a second read.

The batch's rows go to a staging table of its own (eosflow.ingest.store.staging_table), made
here and dropped by the commit; re-staging the same batch replaces it, and its old rejected rows
are deleted first. A task commits its
COPY when it has read its whole range; a failed task commits nothing, and anything a retried
task left twice shows in the commit's count check (staged rows must add up to what was read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import psycopg

from eosflow.ingest.pipelines import Pipeline
from eosflow.ingest.store import create_staging
from eosflow.ingest.transform import REJECTED_COLUMNS, BatchCheck, TransformResult, arrow_source
from eosflow.settings import Settings

Key = tuple[str, int]  # (topic, partition)

_TALLY_SCHEMA = "kafka_topic string, kafka_partition int, rejected boolean, n long, lo long, hi long"
_REJECTED_NAMES = [name for name, _ in REJECTED_COLUMNS]


@dataclass(frozen=True)
class Staged:
    """What one pass read and staged: per (topic, partition), and per kind."""

    read: dict[Key, tuple[int, int, int]]  # records read, lowest and highest offset
    valid: int
    rejected: int


def stage(settings: Settings, pipeline: Pipeline, batch_id: str, result: TransformResult) -> Staged:
    """Read, check and stage the batch in one Spark job; returns what the job counted."""
    with psycopg.connect(settings.warehouse_dsn) as conn:
        table = create_staging(conn, pipeline, batch_id)
    write = copy_writer(settings.warehouse_dsn, table, result.check)
    rows = arrow_source(result.source).mapInArrow(write, _TALLY_SCHEMA).collect()
    return _merge(rows)


def copy_writer(dsn: str, table: str, check: BatchCheck) -> Callable[[Iterator], Iterator]:
    """The function each Spark task runs over its Arrow batches of Kafka records (for mapInArrow)."""
    valid_names = check.valid_names
    valid_copy = _copy_sql(table, valid_names)
    rejected_copy = _copy_sql("staging.rejected", _REJECTED_NAMES)
    key_bytes = check.schema.key == "bytes"

    def write(batches: Iterator) -> Iterator:
        import pyarrow as pa
        import pyarrow.compute as pc

        tally: dict[tuple[str, int, bool], list[int]] = {}
        with _Copy(dsn, valid_copy) as valid, _Copy(dsn, rejected_copy) as rejected:
            for batch in batches:
                checked = check(batch)
                mask = pc.is_valid(checked.column("error"))
                _count(
                    pa.table(
                        [checked.column(c) for c in ("kafka_topic", "kafka_partition", "kafka_offset")]
                        + [mask],
                        names=["kafka_topic", "kafka_partition", "kafka_offset", "rejected"],
                    ),
                    tally,
                )
                rows = checked.filter(pc.invert(mask)).select(valid_names)
                valid.write(_with_hex_bytes(rows, ("kafka_key",)) if key_bytes else rows)
                rejected.write(_with_hex_bytes(checked.filter(mask).select(_REJECTED_NAMES)))
        keys = list(tally)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([k[0] for k in keys], pa.string()),
                pa.array([k[1] for k in keys], pa.int32()),
                pa.array([k[2] for k in keys], pa.bool_()),
                *[pa.array([tally[k][i] for k in keys], pa.int64()) for i in range(3)],
            ],
            names=["kafka_topic", "kafka_partition", "rejected", "n", "lo", "hi"],
        )

    return write


def _with_hex_bytes(rows, names: Sequence[str] = ("raw_key", "raw_value")):
    """Rows with their binary columns in bytea's hex input format (CSV leaves the backslash alone)."""
    import pyarrow as pa

    for name in names:
        hexed = pa.array([None if b is None else "\\x" + b.hex() for b in rows.column(name).to_pylist()])
        rows = rows.set_column(rows.schema.get_field_index(name), name, hexed.cast(pa.string()))
    return rows


def _copy_sql(table: str, names: Sequence[str]) -> str:
    return f"copy {table} ({', '.join(names)}) from stdin (format csv)"


def _count(table, tally: dict[tuple[str, int, bool], list[int]]) -> None:
    """Add one Arrow batch's records per (topic, partition, kind) and their offset bounds to `tally`."""
    groups = table.group_by(["kafka_topic", "kafka_partition", "rejected"]).aggregate(
        [("kafka_offset", "count"), ("kafka_offset", "min"), ("kafka_offset", "max")]
    )
    for g in groups.to_pylist():
        key = (g["kafka_topic"], g["kafka_partition"], g["rejected"])
        seen = (g["kafka_offset_count"], g["kafka_offset_min"], g["kafka_offset_max"])
        tally[key] = list(_combine(tally.get(key), seen))


def _combine(a: Sequence[int] | None, b: Sequence[int]) -> tuple[int, int, int]:
    """Two (records, lowest offset, highest offset) tallies of one partition as one."""
    if a is None:
        return b[0], b[1], b[2]
    return a[0] + b[0], min(a[1], b[1]), max(a[2], b[2])


class _Copy:
    """One COPY FROM STDIN on a connection of its own, opened at the first line, committed on exit.

    The connection's own context commits on a clean exit and rolls back on an error, after the COPY
    context has finished (or aborted) the copy.
    """

    def __init__(self, dsn: str, statement: str) -> None:
        self.dsn, self.statement = dsn, statement
        self.contexts = ExitStack()
        self.copy = None

    def __enter__(self) -> _Copy:
        return self

    def write(self, rows) -> None:
        """Stream an Arrow batch as CSV, one line per row, in the COPY statement's column order."""
        if rows.num_rows == 0:
            return
        if self.copy is None:
            conn = self.contexts.enter_context(psycopg.connect(self.dsn))
            conn.execute("set time zone 'UTC'")  # csv_bytes writes instants as UTC without a zone
            self.copy = self.contexts.enter_context(conn.cursor().copy(self.statement))
        self.copy.write(memoryview(csv_bytes(rows)))

    def __exit__(self, *exc) -> None:
        self.contexts.__exit__(*exc)


def csv_bytes(rows):
    """An Arrow batch as CSV that Postgres reads back exactly.

    Arrow quotes every string (quotes doubled) and writes NULL as an empty unquoted field, which
    Postgres' CSV format reads as NULL, and '' as "", which it reads as an empty string; whitespace
    and newlines inside a quoted field are kept. Instants are written as UTC wall-clock time without
    a zone, which the COPY session (time zone UTC) reads back as the same instant: Arrow formats
    a zoned timestamp seven times slower.
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv

    columns = [
        c.cast(pa.timestamp(c.type.unit)) if pa.types.is_timestamp(c.type) and c.type.tz else c
        for c in rows.columns
    ]
    sink = pa.BufferOutputStream()
    pcsv.write_csv(
        pa.Table.from_arrays(columns, names=rows.schema.names),
        sink,
        pcsv.WriteOptions(include_header=False, quoting_style="needed"),
    )
    return sink.getvalue()


def _merge(rows) -> Staged:
    read: dict[Key, tuple[int, int, int]] = {}
    kinds = {True: 0, False: 0}
    for r in rows:
        key = (r.kafka_topic, r.kafka_partition)
        kinds[r.rejected] += r.n
        read[key] = _combine(read.get(key), (r.n, r.lo, r.hi))
    return Staged(read, valid=kinds[False], rejected=kinds[True])
