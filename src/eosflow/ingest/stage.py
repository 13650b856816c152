"""Step 4: the batch's output and rejected rows into staging by COPY, in the same pass as the read.

Spark formats every checked row as one CSV line (valid rows in the target's columns, rejected rows
in staging.rejected's), and each Spark task streams its lines to Postgres with `COPY FROM STDIN`
while it reads: the batch goes through Spark once, never through the driver, and Postgres parses
it while Spark validates the next rows. Each task also counts what it read per partition (records,
lowest and highest offset), so the count the commit checks staging against comes from the same
pass, not from a second read.

Re-staging the same batch replaces it: its old staged rows are deleted first. A task commits its
COPY when it has read its whole range; a failed task commits nothing, and anything a retried
task left twice shows in the commit's count check (staged rows must add up to what was read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import psycopg
from psycopg import sql

from eosflow.ingest.pipelines import Pipeline
from eosflow.ingest.store import staging_table
from eosflow.ingest.transform import REJECTED_COLUMNS, VALID_COLUMNS, TransformResult
from eosflow.settings import Settings

Key = tuple[str, int]  # (topic, partition)

# What Postgres' CSV format reads back exactly: quotes doubled, NULL unquoted-empty, '' quoted,
# whitespace kept (Spark trims it on write by default), instants with their zone.
CSV_OPTIONS = {
    "quote": '"',
    "escape": '"',
    "nullValue": "",
    "emptyValue": '""',
    "ignoreLeadingWhiteSpace": "false",
    "ignoreTrailingWhiteSpace": "false",
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
}
_TALLY_SCHEMA = "kafka_topic string, kafka_partition int, rejected boolean, n long, lo long, hi long"


@dataclass(frozen=True)
class Staged:
    """What one pass read and staged: per (topic, partition), and per kind."""

    read: dict[Key, tuple[int, int, int]]  # records read, lowest and highest offset
    valid: int
    rejected: int


def stage(settings: Settings, pipeline: Pipeline, batch_id: str, result: TransformResult) -> Staged:
    """Read, check and stage the batch in one Spark job; returns what the job counted."""
    table = staging_table(pipeline)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        conn.execute(sql.SQL("delete from {} where batch_id = %s").format(sql.SQL(table)), (batch_id,))
        conn.execute("delete from staging.rejected where batch_id = %s", (batch_id,))
    write = copy_writer(settings.warehouse_dsn, table)
    rows = csv_lines(result).mapInArrow(write, _TALLY_SCHEMA).collect()
    return _merge(rows)


def csv_lines(result: TransformResult):
    """Every checked row as (kafka_topic, kafka_partition, kafka_offset, rejected, line)."""
    from pyspark.sql import functions as F

    def line(columns: list[tuple[str, str]], source: dict[str, object]):
        fields = [source.get(name, F.col(name)).cast(t).alias(name) for name, t in columns]
        return F.to_csv(F.struct(*fields), CSV_OPTIONS)

    def hex_bytes(name: str):
        # bytea's hex input format; CSV leaves the backslash alone.
        return F.when(F.col(name).isNotNull(), F.concat(F.lit("\\x"), F.hex(name)))

    rejected = F.col("error").isNotNull()
    valid_types = [(n, "string" if t == "timestamp" else t) for n, t in VALID_COLUMNS]
    return result.checked.select(
        F.col("kafka_topic"),
        F.col("kafka_partition"),
        F.col("kafka_offset"),
        rejected.alias("rejected"),
        F.when(
            rejected,
            line(
                [(n, "string") for n, _ in REJECTED_COLUMNS],
                {
                    "raw_key": hex_bytes("raw_key"),
                    "raw_value": hex_bytes("raw_value"),
                    "kafka_timestamp": _instant("kafka_timestamp"),
                },
            ),
        )
        .otherwise(line(valid_types, {n: _instant(n) for n, t in VALID_COLUMNS if t == "timestamp"}))
        .alias("line"),
    )


def _instant(name: str):
    from pyspark.sql import functions as F

    return F.date_format(F.col(name), CSV_OPTIONS["timestampFormat"])


def copy_writer(dsn: str, table: str) -> Callable[[Iterator], Iterator]:
    """The function each Spark task runs over its Arrow batches of `csv_lines` (for mapInArrow)."""
    valid_copy = _copy_sql(table, VALID_COLUMNS)
    rejected_copy = _copy_sql("staging.rejected", REJECTED_COLUMNS)

    def write(batches: Iterator) -> Iterator:
        import pyarrow as pa
        import pyarrow.compute as pc

        tally: dict[tuple[str, int, bool], list[int]] = {}
        with _Copy(dsn, valid_copy) as valid, _Copy(dsn, rejected_copy) as rejected:
            for batch in batches:
                _count(pa.Table.from_batches([batch]), tally)
                mask = batch.column("rejected")
                valid.write(batch.filter(pc.invert(mask)).column("line"))
                rejected.write(batch.filter(mask).column("line"))
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


def _copy_sql(table: str, columns: list[tuple[str, str]]) -> str:
    names = ", ".join(name for name, _ in columns)
    return f"copy {table} ({names}) from stdin (format csv)"


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

    def write(self, lines) -> None:
        """Stream an Arrow string array as CSV lines (each becomes one row)."""
        if len(lines) == 0:
            return
        if self.copy is None:
            conn = self.contexts.enter_context(psycopg.connect(self.dsn))
            self.copy = self.contexts.enter_context(conn.cursor().copy(self.statement))
        self.copy.write(_joined(lines))
        self.copy.write(b"\n")

    def __exit__(self, *exc) -> None:
        self.contexts.__exit__(*exc)


def _joined(lines) -> memoryview:
    """The lines of an Arrow string array as one buffer, newline-separated (one copy, in C++)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_large_string(lines.type):
        lines = lines.cast(pa.string())  # a batch is far below 2 GiB; binary_join wants list<string>
    one_list = pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines)
    return memoryview(pc.binary_join(one_list, "\n")[0].as_buffer())


def _merge(rows) -> Staged:
    read: dict[Key, tuple[int, int, int]] = {}
    kinds = {True: 0, False: 0}
    for r in rows:
        key = (r.kafka_topic, r.kafka_partition)
        kinds[r.rejected] += r.n
        read[key] = _combine(read.get(key), (r.n, r.lo, r.hi))
    return Staged(read, valid=kinds[False], rejected=kinds[True])
