"""Step 4: the batch's output and rejected rows into staging by COPY, in the same pass as the read.

Each Spark task reads its planned range and hands it to Python as Arrow batches; the task checks
every record (eosflow.transform.BatchCheck), formats the valid rows in the target's columns
and the rejected ones in staging.rejected's as CSV, and streams both to Postgres with
`COPY FROM STDIN` while it reads: the batch goes through Spark once, never through the driver, and
Postgres parses it while the task checks the next rows. Each task also counts what it read per
partition (records, lowest and highest offset), so the count the commit checks staging against
comes from the same pass, not from a second read.

The batch's rows go to a staging table of its own (eosflow.sinks.postgres.target.staging_table), made
here and dropped by the commit; re-staging the same batch replaces it, and its old rejected rows
are deleted first. A task commits its
COPY when it has read its whole range; a failed task commits nothing, and anything a retried
task left twice shows in the commit's count check (staged rows must add up to what was read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Any

import psycopg

from eosflow.ledger.ranges import Plan
from eosflow.schema.arrow import valid_columns
from eosflow.settings import Settings
from eosflow.sinks.postgres import partitions
from eosflow.sinks.postgres.target import create_staging, drop_ranges
from eosflow.sinks.protocol import Pipeline
from eosflow.transform import REJECTED_COLUMNS, BatchCheck, TransformResult

Key = tuple[str, int]  # (topic, partition)

_TALLY_SCHEMA = "kafka_topic string, kafka_partition int, rejected boolean, n long, lo long, hi long"
_REJECTED_NAMES = [name for name, _ in REJECTED_COLUMNS]


@dataclass(frozen=True)
class Staged:
    """What one pass read and staged: per (topic, partition), and per kind."""

    read: dict[Key, tuple[int, int, int]]  # records read, lowest and highest offset
    valid: int
    rejected: int


def stage(
    settings: Settings, pipeline: Pipeline, plan: Plan, result: TransformResult, by_range: bool = False
) -> Staged:
    """Read, check and stage the batch in one Spark job; returns what the job counted.

    by_range: each planned range into a child of its own (a partitioned target's commit attaches
    them); otherwise the whole batch into one staging table (replays, the comparison modes).
    """
    with psycopg.connect(settings.warehouse_dsn) as conn:
        if by_range:
            clear_ranges(conn, plan.batch_id)
            write = range_writer(settings.warehouse_dsn, pipeline, plan, result.check)
        else:
            table = create_staging(conn, pipeline, plan.batch_id)
            write = copy_writer(settings.warehouse_dsn, table, result.check)
    rows = result.map_records(write, _TALLY_SCHEMA).collect()
    return _merge(rows)


def clear_ranges(conn: psycopg.Connection, batch_id: str) -> None:
    """Forget an earlier attempt's staged ranges of the batch: their children and rejected rows."""
    with conn.transaction():
        drop_ranges(conn, batch_id)
        conn.execute("delete from staging.rejected where batch_id = %s", (batch_id,))


def range_writer(
    dsn: str, pipeline: Pipeline, plan: Plan, check: BatchCheck
) -> Callable[[Iterator], Iterator]:
    """The function each Spark task runs over the Arrow batches of its one planned range.

    The task makes the range's child (eosflow.sinks.postgres.partitions) and fills it by COPY ... FREEZE
    in one transaction, builds its primary key, and records its counts in staging.ranges in the same
    transaction; a retried task replaces all of it. Its rejected rows go to staging.rejected on a
    second connection that commits first, so recorded counts always have their rejected rows.
    """
    bounds = {(r.topic, r.partition): (r.start, r.end) for r in plan.ranges}
    target, batch_id, valid_names = pipeline.target_table, plan.batch_id, check.valid_names
    hexed = binary_columns(check.schema)

    def write(batches: Iterator) -> Iterator:
        import pyarrow as pa
        import pyarrow.compute as pc

        # rejected? -> records, lo, hi
        counts: dict[bool, list[Any]] = {False: [0, None, None], True: [0, None, None]}
        key = None
        with ExitStack() as contexts:
            valid: _RangeCopy | None = None
            rejected: _Copy | None = None
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                checked = check(batch)
                if key is None:
                    key = (
                        checked.column("kafka_topic")[0].as_py(),
                        checked.column("kafka_partition")[0].as_py(),
                    )
                    start, end = bounds[key]
                    child = partitions.staged_child(batch_id, *key)
                    valid = contexts.enter_context(
                        _RangeCopy(dsn, target, child, key, start, end, valid_names)
                    )
                    rejected = contexts.enter_context(
                        _Copy(dsn, _copy_sql("staging.rejected", _REJECTED_NAMES))
                    )
                    rejected.before = (
                        "delete from staging.rejected where batch_id = %s and kafka_topic = %s "
                        "and kafka_partition = %s",
                        (batch_id, *key),
                    )
                assert valid is not None and rejected is not None  # opened with the first batch
                _same_partition(checked, key)
                errors = checked.column("error")
                offsets = checked.column("kafka_offset")
                if errors.null_count == checked.num_rows:  # nothing rejected: no filtering copy
                    _tally(counts[False], checked.num_rows, offsets)
                    rows = checked.select(valid_names)
                    valid.write(_with_hex_bytes(rows, hexed) if hexed else rows)
                    continue
                mask = pc.is_valid(errors)
                good = checked.filter(pc.invert(mask))
                bad = checked.filter(mask)
                _tally(counts[False], good.num_rows, good.column("kafka_offset"))
                _tally(counts[True], bad.num_rows, bad.column("kafka_offset"))
                rows = good.select(valid_names)
                valid.write(_with_hex_bytes(rows, hexed) if hexed else rows)
                rejected.write(_with_hex_bytes(bad.select(_REJECTED_NAMES)))
            if valid is not None:
                assert rejected is not None  # opened with valid
                rejected.close()  # the rejected rows commit first
                valid.finish(batch_id, counts[False][0], counts[True][0])
        tallies = [(key, kind, c) for kind, c in counts.items() if c[0]] if key else []
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([k[0] for k, _, _ in tallies], pa.string()),
                pa.array([k[1] for k, _, _ in tallies], pa.int32()),
                pa.array([kind for _, kind, _ in tallies], pa.bool_()),
                *[pa.array([c[i] for _, _, c in tallies], pa.int64()) for i in range(3)],
            ],
            names=["kafka_topic", "kafka_partition", "rejected", "n", "lo", "hi"],
        )

    return write


def _tally(tally: list, n: int, offsets) -> None:
    """Records and offset bounds, added up: Kafka hands a partition's records in offset order."""
    if n == 0:
        return
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    tally[0] += n
    tally[1] = first if tally[1] is None else min(tally[1], first)
    tally[2] = last if tally[2] is None else max(tally[2], last)


def _same_partition(checked, key: tuple[str, int]) -> None:
    import pyarrow.compute as pc

    topics, partitions_ = checked.column("kafka_topic"), checked.column("kafka_partition")
    if not (pc.all(pc.equal(topics, key[0])).as_py() and pc.all(pc.equal(partitions_, key[1])).as_py()):
        raise RuntimeError(
            f"a Spark task read more than one Kafka partition (first {key}): stage by range needs one"
        )


class _RangeCopy:
    """One range's child: made, filled by COPY ... FREEZE, keyed and counted in one transaction."""

    def __init__(self, dsn, target, child, key, start, end, names) -> None:
        self.child, self.key = child, key
        self.conn = psycopg.connect(dsn)
        self.conn.execute("set time zone 'UTC'")  # csv_bytes writes instants as UTC without a zone
        for statement in partitions.create_child(target, child, key[0], key[1], start, end):
            self.conn.execute(statement)
        # FREEZE: the child was made in this transaction, so its rows can be written frozen.
        self._copying: AbstractContextManager[psycopg.Copy] | None = self.conn.cursor().copy(
            f"copy {child} ({', '.join(names)}) from stdin (format csv, freeze)"
        )
        self.copy = self._copying.__enter__()

    def __enter__(self) -> _RangeCopy:
        return self

    def write(self, rows) -> None:
        if rows.num_rows:
            self.copy.write(memoryview(csv_bytes(rows)))

    def finish(self, batch_id: str, written: int, rejected: int) -> None:
        """End the COPY, key the child, record its counts, and commit all of it."""
        copying, self._copying = self._copying, None
        assert copying is not None  # finished once
        copying.__exit__(None, None, None)
        self.conn.execute(partitions.add_key(self.child))
        self.conn.execute(
            "insert into staging.ranges (batch_id, topic, partition, child, rows_written, rows_rejected) "
            "values (%s, %s, %s, %s, %s, %s) on conflict (batch_id, topic, partition) do update set "
            "child = excluded.child, rows_written = excluded.rows_written, "
            "rows_rejected = excluded.rows_rejected",
            (batch_id, *self.key, self.child, written, rejected),
        )
        self.conn.commit()

    def __exit__(self, *exc) -> None:
        try:
            if self._copying is not None:  # not finished: abort the COPY, roll everything back
                self._copying.__exit__(*exc) if exc[0] else self._copying.__exit__(
                    RuntimeError, RuntimeError("a range's COPY left without finish()"), None
                )
        finally:
            self.conn.close()  # without a commit, the child and its rows are gone with the connection


def copy_writer(dsn: str, table: str, check: BatchCheck) -> Callable[[Iterator], Iterator]:
    """The function each Spark task runs over its Arrow batches of Kafka records (for mapInArrow)."""
    valid_names = check.valid_names
    valid_copy = _copy_sql(table, valid_names)
    rejected_copy = _copy_sql("staging.rejected", _REJECTED_NAMES)
    hexed = binary_columns(check.schema)

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
                valid.write(_with_hex_bytes(rows, hexed) if hexed else rows)
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


def binary_columns(schema) -> tuple[str, ...]:
    """The valid rows' bytea columns (`key: bytes`, bytea columns), which the CSV carries as hex."""
    import pyarrow as pa

    return tuple(name for name, arrow_type in valid_columns(schema) if arrow_type == pa.binary())


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
    context has finished (or aborted) the copy. `before`: a statement run first, in the same transaction.
    """

    def __init__(self, dsn: str, statement: str) -> None:
        self.dsn, self.statement = dsn, statement
        self.contexts = ExitStack()
        self.copy: psycopg.Copy | None = None
        self.before: tuple[str, tuple] | None = None

    def __enter__(self) -> _Copy:
        return self

    def write(self, rows) -> None:
        """Stream an Arrow batch as CSV, one line per row, in the COPY statement's column order."""
        if rows.num_rows == 0:
            return
        if self.copy is None:
            conn = self.contexts.enter_context(psycopg.connect(self.dsn))
            conn.execute("set time zone 'UTC'")  # csv_bytes writes instants as UTC without a zone
            if self.before is not None:
                conn.execute(*self.before)
            self.copy = self.contexts.enter_context(conn.cursor().copy(self.statement))
        self.copy.write(memoryview(csv_bytes(rows)))

    def close(self) -> None:
        """Finish and commit now (the exit does nothing more)."""
        self.contexts.close()

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
