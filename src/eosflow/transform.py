"""Kafka records -> typed rows of the pipeline's declared columns, or rejected rows with a reason.

`BatchCheck` turns one Arrow batch of Kafka records (eosflow.sources.kafka.range_read's
RECORD_COLUMNS, as a Spark task reads its range) into one checked batch: the declared
columns typed (NULL for a rejected row) and one deterministic `error` column (NULL = valid), so
re-running a batch gives the same rows, which the exactly-once commit relies on. The value's rules
are the declaration's (eosflow.schema.record); the ones on the Kafka columns are here, vectorized,
since they look at a whole column at once. Checks, in order; the first one that fails is the row's
only error:

1. ``invalid timestamp: <ms> ms since 1970-01-01 is before 0001-01-01|after 9999-12-31 in UTC
   (kafka_timestamp is NULL)``: Kafka's timestamp, outside the years a timestamptz may take here
   (and Arrow's CSV writer cannot even write a year past 32767). No row can keep it, the rejected
   one included, so this check comes first: its reason is where the timestamp survives. Kafka 4
   takes any past timestamp by default, and any future one on a topic that allows it: a producer
   writing microseconds lands in year 57970, one writing nanoseconds beyond what microseconds in
   64 bits can count (which Spark's own Kafka source could not read at all). The milliseconds
   are Kafka's own, counted in the proleptic Gregorian calendar as Postgres counts
2. the value's checks (eosflow.schema.record): null value, oversized, not UTF-8, not JSON, missing,
   mistyped and invalid fields; or, for a pipeline with its own Python transform, the function's
   rows held to the declaration (eosflow.schema.user_transform)
3. ``invalid key: holds a NUL character, which Postgres text cannot store (raw_key keeps the
   bytes)``: only for `key: text`; `key: bytes` keeps any key exactly. A typed key (`key: bigint`,
   `key: uuid`, ...) is read by eosflow.schema.record's `key_check`: ``mistyped key (expected
   <type>)`` or ``invalid key (<why>)``
4. ``invalid header: <name> holds a NUL character, which Postgres jsonb cannot store``:
   kafka_headers is jsonb. Only a header's value can hold one: librdkafka hands a header's name
   over as a C string, cut at its first NUL

A text key or header value that is not UTF-8 is not rejected: it lands with U+FFFD in place of
each invalid sequence (Python's "replace"), deterministic but not faithful; only a rejected row
keeps the key's bytes (raw_key), and `key: bytes` keeps every key's.

`transform` is the same check on the planned read, lazily: nothing runs a Spark job until the
caller writes or collects. The staging step does not go through it twice: it runs `BatchCheck`
inside the same Python task that COPYs the rows (eosflow.sinks.postgres.stage).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

import pyarrow as pa
import pyarrow.compute as pc

from eosflow.schema.arrow import UTC_MICROS, to_arrow, valid_columns
from eosflow.schema.avro import RegistryConfig
from eosflow.schema.declaration import Column, RecordSchema
from eosflow.schema.record import RecordCheck, key_check, key_decoder
from eosflow.schema.user_transform import UserTransform

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

REJECTED_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("pipeline", pa.string()),
    ("kafka_topic", pa.string()),
    ("kafka_partition", pa.int32()),
    ("kafka_offset", pa.int64()),
    ("kafka_timestamp", UTC_MICROS),
    ("raw_key", pa.binary()),
    ("raw_value", pa.binary()),
    ("error", pa.string()),
    ("batch_id", pa.string()),
]


def checked_columns(schema: RecordSchema) -> list[tuple[str, pa.DataType]]:
    """Both halves' columns and `error`, in one batch: one pass over the source can write both."""
    return list(dict([("pipeline", pa.string()), *valid_columns(schema), *REJECTED_COLUMNS]).items())


# One record's check: (None, its typed fields), or (the first check it fails, None).
_Result = tuple[str | None, list | None]


class CheckedRecords(NamedTuple):
    """One Arrow batch's records checked: results in record order, and the columns the check fixed."""

    results: list[_Result]
    timestamps: pa.Array  # the Kafka timestamps, NULL where the warehouse could not keep one
    kafka_key: pa.Array  # the key as the declaration types it


@dataclass(frozen=True)
class BatchCheck:
    """Checks Arrow batches of Kafka records; a plain value, so Spark can ship it to its Python tasks."""

    pipeline: str
    batch_id: str
    transform_version: str
    max_value_bytes: int
    schema: RecordSchema
    declaration_version: int | None = None  # recorded on every row (eosflow.declarations)
    registry: RegistryConfig | None = None  # where an Avro or Protobuf pipeline's writer schemas are

    def __post_init__(self) -> None:
        if self.max_value_bytes < 1:
            raise ValueError(f"max_value_bytes must be >= 1, got {self.max_value_bytes}")

    @cached_property
    def _record(self) -> RecordCheck:
        return RecordCheck(self.schema, self.max_value_bytes, self.registry)

    @cached_property
    def _changes(self):
        from eosflow.schema.changes import ChangeCheck

        return ChangeCheck(self.schema, self.max_value_bytes, self.registry)

    @cached_property
    def _key_check(self):
        if self.schema.key_type is None:
            return None
        return key_check(self.schema.key_type, key_decoder(self.schema, self.registry))

    @cached_property
    def _user(self) -> UserTransform:
        return UserTransform(self.schema)

    @cached_property
    def columns(self) -> list[tuple[str, pa.DataType]]:
        return checked_columns(self.schema)

    @property
    def valid_names(self) -> list[str]:
        return [name for name, _ in valid_columns(self.schema)]

    def records(self, batch: pa.RecordBatch) -> CheckedRecords:
        """Every record's check, typed as Python values: what a sink that is not a table encodes."""
        changes = self.schema.changes is not None
        # Parsed JSON holds no reference cycles, yet the cyclic collector would walk every object
        # of the batch again and again while it is built: 15-20% of the check's time.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if changes:  # a change needs its key too (a keyed topic's key is the row's primary key)
                change = self._changes
                values, keys_ = batch.column("value").to_pylist(), batch.column("key").to_pylist()
                headers = batch.column("kafka_headers").to_pylist()
                results = [change(k, v, h) for k, v, h in zip(keys_, values, headers, strict=True)]
            elif self.schema.transform is None:
                check = self._record.check_value
                results = [check(v) for v in batch.column("value").to_pylist()]
            else:
                results = self._user(batch)
        finally:
            if gc_was_enabled:
                gc.enable()
        timestamps = _reject_unstorable_timestamps(results, batch.column("timestamp"))
        keys = batch.column("key")
        if self.schema.key_type is not None:
            kafka_key = _typed_keys(results, keys, self.schema.key_type, self._key_check)
        elif self.schema.key == "text":
            _reject_nul_keys(results, keys)
            kafka_key = _text(keys)
        else:
            kafka_key = keys
        _reject_nul_headers(results, batch.column("kafka_headers"))
        return CheckedRecords(results, timestamps, kafka_key)

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        results, timestamps, kafka_key = self.records(batch)
        keys = batch.column("key")
        errors = [error for error, _ in results]
        error_column = pa.array(errors, pa.string())
        declared = self.schema.columns
        empty = (None,) * len(declared)
        fields = list(zip(*(typed or empty for _, typed in results), strict=True)) or [()] * len(declared)
        columns: dict[str, pa.Array] = {
            "pipeline": _constant(self.pipeline, n),
            "kafka_topic": batch.column("topic"),
            "kafka_partition": batch.column("partition"),
            "kafka_offset": batch.column("offset"),
            "kafka_timestamp": timestamps,
            "kafka_key": kafka_key,
            "kafka_headers": batch.column("kafka_headers"),
            **{c.name: to_arrow(c, fields[i]) for i, c in enumerate(declared)},
            **_raw_bytes(error_column, keys, batch.column("value")),
            "error": error_column,
            "batch_id": _constant(self.batch_id, n),
            "transform_version": _constant(self.transform_version, n),
            "declaration_version": pa.array([self.declaration_version] * n, pa.int32()),
        }
        # The cast also turns Spark's large_string/large_binary, and any zone, into the declared types.
        return pa.RecordBatch.from_arrays(
            [columns[name].cast(arrow_type) for name, arrow_type in self.columns],
            names=[name for name, _ in self.columns],
        )

    def batches(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The function a Spark task runs over its Arrow batches (for mapInArrow)."""
        for batch in batches:
            yield self(batch)


def _raw_bytes(errors: pa.Array, key: pa.Array, value: pa.Array) -> dict[str, pa.Array]:
    """raw_key and raw_value for the rejected rows only: a valid row's columns hold what it said,
    and most batches reject nothing, so most batches carry no second copy of their bytes."""
    n = len(errors)
    if errors.null_count == n:
        return {"raw_key": pa.nulls(n, pa.binary()), "raw_value": pa.nulls(n, pa.binary())}
    rejected = pc.is_valid(errors)
    return {
        "raw_key": pc.if_else(rejected, key, pa.scalar(None, key.type)),
        "raw_value": pc.if_else(rejected, value, pa.scalar(None, value.type)),
    }


# The instants every reader of the warehouse gets back exactly, in Spark's microseconds since
# 1970-01-01 UTC: Postgres refuses year 0 in the form the COPY writes, Arrow's CSV writer cannot
# write a year past 32767, and no Python client reads a year past 9999 (as types.storable_instant).
_FIRST_MICROS = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
_LAST_MICROS = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z
_PER_SECOND = {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}


def _reject_unstorable_timestamps(results: list[_Result], timestamps: pa.Array) -> pa.Array:
    """Reject, in `results`, every record whose Kafka timestamp the warehouse cannot keep; returns
    the timestamps with theirs NULL.

    The first check of all, so it replaces any error the value gave: the row cannot keep such a
    timestamp (not even a rejected row), and the reason is the only place it survives. One
    vectorized test per batch; only a batch with a hit is looked at row by row.
    """
    if not pa.types.is_timestamp(timestamps.type):  # an all-NULL column of an empty batch, say
        timestamps = timestamps.cast(UTC_MICROS)
    # In the column's own unit: Kafka's milliseconds may lie beyond what microseconds can count.
    per_second = _PER_SECOND[timestamps.type.unit]
    counts = timestamps.cast(pa.int64())
    first, last = _FIRST_MICROS * per_second // 10**6, _LAST_MICROS * per_second // 10**6
    outside = pc.or_(pc.less(counts, first), pc.greater(counts, last))
    if not pc.any(outside).as_py():
        return timestamps
    for i in pc.indices_nonzero(outside).to_pylist():
        ms = counts[i].as_py() * 1000 // per_second
        side = "before 0001-01-01" if ms < 0 else "after 9999-12-31"
        error = f"invalid timestamp: {ms} ms since 1970-01-01 is {side} in UTC (kafka_timestamp is NULL)"
        results[i] = (error, None)
    return pc.if_else(outside, pa.scalar(None, timestamps.type), timestamps)


NUL_IN_KEY = "invalid key: holds a NUL character, which Postgres text cannot store (raw_key keeps the bytes)"


def _reject_nul_keys(results: list[_Result], keys: pa.Array) -> None:
    """Reject, in `results`, the valid records whose text key holds a NUL (Postgres text cannot).

    A key of binary numbers holds NULs too: such topics declare `key: bytes`. Vectorized; only the
    rows it hits are looked at.
    """
    nul_keys = pc.match_substring(keys.cast(pa.binary()), "\x00")
    if pc.any(nul_keys).as_py():
        for i, hit in enumerate(nul_keys.to_pylist()):
            if hit and results[i][0] is None:
                results[i] = (NUL_IN_KEY, None)


def _typed_keys(results: list[_Result], keys: pa.Array, key_type, check) -> pa.Array:
    """The keys read as the declared type (`key: bigint`, ...) by `check` (record.key_check); a valid
    record whose key is not of it is rejected in `results`. Rejected rows keep the key's bytes in raw_key."""
    values = []
    for i, key in enumerate(keys.cast(pa.binary()).to_pylist()):
        error, value = check(key)
        if error is not None and results[i][0] is None:
            results[i] = (error, None)
        values.append(value if error is None else None)
    return to_arrow(Column("kafka_key", key_type), values)


def _reject_nul_headers(results: list[_Result], headers: pa.Array) -> None:
    """Reject, in `results`, the valid records whose headers Postgres jsonb cannot store.

    A NUL in the headers' JSON arrives as the escape \\u0000, which a header may also hold as plain
    text (an escaped backslash), so a hit of the vectorized test is parsed.
    """
    escaped = pc.match_substring(headers.cast(pa.string()), "\\u0000")
    if pc.any(escaped).as_py():
        texts = headers.to_pylist()
        for i, hit in enumerate(escaped.to_pylist()):
            if hit and results[i][0] is None:
                name = next(
                    (
                        h["key"]
                        for h in json.loads(texts[i])
                        if "\x00" in h["key"] or "\x00" in (h["value"] or "")
                    ),
                    None,
                )
                if name is not None:
                    error = (
                        f"invalid header: {name.replace(chr(0), '?')} holds a NUL character, "
                        "which Postgres jsonb cannot store"
                    )
                    results[i] = (error, None)


def _constant(value: str, n: int) -> pa.Array:
    return pa.array([value] * n, pa.string())


def _decode(b: bytes | None) -> str | None:
    """Binary -> text, invalid UTF-8 replaced by U+FFFD (keys and headers are kept, not validated)."""
    return None if b is None else b.decode("utf-8", "replace")


def _text(keys: pa.Array) -> pa.Array:
    try:
        return keys.cast(pa.string())  # zero-copy when every key is valid UTF-8, as they nearly always are
    except pa.ArrowInvalid:
        return pa.array([_decode(k) for k in keys.to_pylist()], pa.string())


def spark_type(arrow_type: pa.DataType) -> str:
    """The Spark SQL type that receives an Arrow column of `arrow_type` from mapInArrow."""
    if pa.types.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    return _SPARK_TYPES[arrow_type]


_SPARK_TYPES = {
    pa.string(): "string",
    pa.int32(): "int",
    pa.int64(): "bigint",
    UTC_MICROS: "timestamp",
    pa.binary(): "binary",
    pa.bool_(): "boolean",
    pa.float64(): "double",
    pa.date32(): "date",
}


def spark_ddl(columns: list[tuple[str, pa.DataType]]) -> str:
    return ", ".join(f"{name} {spark_type(arrow_type)}" for name, arrow_type in columns)


class Job(Protocol):
    """What a RecordSource's map returns: a Spark DataFrame, or an InlineJob (eosflow.sources.kafka.inline);
    `collect()` runs it and returns its rows (attribute access, as Spark's Row)."""

    def collect(self) -> list[Any]: ...


class RecordSource(Protocol):
    """Where a check's records come from: a function run in Spark's tasks over their Arrow batches of
    RECORD_COLUMNS (eosflow.sources.kafka.read.PlannedRead reads the planned ranges, and
    eosflow.sources.kafka.inline.InlineRead a small plan's, in the run's own process; the class-data
    sharing training and the tests hand over batches already in memory, eosflow.sources.batches)."""

    def map(self, fn: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], ddl: str) -> Job: ...


@dataclass(frozen=True)
class TransformResult:
    """The source and its check; `checked` is every input row once, `valid` and `rejected` its halves.

    All three are lazy DataFrames; the halves have exactly the schema's valid columns and
    REJECTED_COLUMNS.
    """

    source: RecordSource
    check: BatchCheck

    def map_records(self, fn: Callable[[Iterator[pa.RecordBatch]], Iterator[Any]], ddl: str) -> Job:
        """What `fn` yields, run in each task over the Arrow batches of its Kafka records (as
        mapInArrow): how a sink writes, in the same pass as the read and the check."""
        return self.source.map(fn, ddl)

    @property
    def checked(self) -> DataFrame:
        # A Spark source's: the inline source's job is only collected, by the sinks' map_records.
        return cast("DataFrame", self.map_records(self.check.batches, spark_ddl(self.check.columns)))

    @property
    def valid(self) -> DataFrame:
        from pyspark.sql import functions as F

        return self.checked.where(F.col("error").isNull()).select(self.check.valid_names)

    @property
    def rejected(self) -> DataFrame:
        from pyspark.sql import functions as F

        return self.checked.where(F.col("error").isNotNull()).select([n for n, _ in REJECTED_COLUMNS])


def transform(
    source: RecordSource,
    *,
    pipeline: str,
    batch_id: str,
    transform_version: str,
    max_value_bytes: int,
    schema: RecordSchema,
    declaration_version: int | None = None,
    registry: RegistryConfig | None = None,
) -> TransformResult:
    """Split Kafka records into typed `valid` rows of the declared columns and `rejected` rows."""
    check = BatchCheck(
        pipeline, batch_id, transform_version, max_value_bytes, schema, declaration_version, registry
    )
    return TransformResult(source, check)
