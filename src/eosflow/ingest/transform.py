"""Kafka records -> typed order rows, or rejected rows with a reason; every input row exactly once.

`BatchCheck` turns one Arrow batch of Kafka records (Spark's Kafka batch source with
`includeHeaders=true`, as `arrow_source` hands it to Python) into one checked batch: the order
fields typed (NULL for a rejected row) and one deterministic `error` column (NULL = valid), so
re-running a batch gives the same rows, which the exactly-once commit relies on. The rules
themselves are in `eosflow.ingest.checks`; the ones on the Kafka columns (timestamp, key, headers)
are here, vectorized, since they look at a whole column at once.

`transform_orders` is the same transform on a Spark DataFrame, lazily: nothing runs a Spark job
until the caller writes or collects. The staging step does not go through it twice: it runs
`BatchCheck` inside the same Python task that COPYs the rows (eosflow.ingest.stage).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from eosflow.ingest.checks import FIELDS, check_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

VALID_COLUMNS: list[tuple[str, str]] = [
    ("kafka_topic", "string"),
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("kafka_timestamp", "timestamp"),
    ("kafka_key", "string"),
    ("kafka_headers", "string"),
    ("event_id", "string"),
    ("event_type", "string"),
    ("event_time", "timestamp"),
    ("order_id", "string"),
    ("customer_id", "string"),
    ("amount_cents", "bigint"),
    ("currency", "string"),
    ("schema_version", "int"),
    ("batch_id", "string"),
    ("transform_version", "string"),
]

REJECTED_COLUMNS: list[tuple[str, str]] = [
    ("pipeline", "string"),
    ("kafka_topic", "string"),
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("kafka_timestamp", "timestamp"),
    ("raw_key", "binary"),
    ("raw_value", "binary"),
    ("error", "string"),
    ("batch_id", "string"),
]

# Both halves' columns and `error`, in one batch: one pass over the source can write both.
CHECKED_COLUMNS: list[tuple[str, str]] = list(
    dict([("pipeline", "string"), *VALID_COLUMNS, *REJECTED_COLUMNS]).items()
)

_UTC_MICROS = pa.timestamp("us", tz="UTC")
_ARROW_TYPES = {
    "string": pa.string(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "timestamp": _UTC_MICROS,
    "binary": pa.binary(),
}
_FIELD_TYPES = [_ARROW_TYPES[dict(VALID_COLUMNS)[f.name]] for f in FIELDS]
_NO_FIELDS = (None,) * len(FIELDS)


@dataclass(frozen=True)
class BatchCheck:
    """Checks Arrow batches of Kafka records; a plain value, so Spark can ship it to its Python tasks."""

    pipeline: str
    batch_id: str
    transform_version: str
    max_value_bytes: int

    def __post_init__(self) -> None:
        if self.max_value_bytes < 1:
            raise ValueError(f"max_value_bytes must be >= 1, got {self.max_value_bytes}")

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        # Parsed JSON holds no reference cycles, yet the cyclic collector would walk every object
        # of the batch again and again while it is built: 15-20% of the check's time.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            results = [check_value(v, self.max_value_bytes) for v in batch.column("value").to_pylist()]
        finally:
            if gc_was_enabled:
                gc.enable()
        timestamps = _reject_unstorable_timestamps(results, batch.column("timestamp"))
        _reject_unstorable_kafka_columns(results, batch.column("key"), batch.column("kafka_headers"))
        errors = [error for error, _ in results]
        fields = list(zip(*(typed or _NO_FIELDS for _, typed in results), strict=True)) or [()] * len(FIELDS)
        columns: dict[str, pa.Array] = {
            "pipeline": _constant(self.pipeline, n),
            "kafka_topic": batch.column("topic"),
            "kafka_partition": batch.column("partition"),
            "kafka_offset": batch.column("offset"),
            "kafka_timestamp": timestamps,
            "kafka_key": _text(batch.column("key")),
            "kafka_headers": batch.column("kafka_headers"),
            **{f.name: pa.array(fields[i], _FIELD_TYPES[i]) for i, f in enumerate(FIELDS)},
            "raw_key": batch.column("key"),
            "raw_value": batch.column("value"),
            "error": pa.array(errors, pa.string()),
            "batch_id": _constant(self.batch_id, n),
            "transform_version": _constant(self.transform_version, n),
        }
        # The cast also turns Spark's large_string/large_binary, and any zone, into the declared types.
        return pa.RecordBatch.from_arrays(
            [columns[name].cast(_ARROW_TYPES[t]) for name, t in CHECKED_COLUMNS],
            names=[name for name, _ in CHECKED_COLUMNS],
        )

    def batches(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The function a Spark task runs over its Arrow batches (for mapInArrow)."""
        for batch in batches:
            yield self(batch)


# One record's check: (None, its typed fields), or (the first check it fails, None).
_Result = tuple[str | None, list | None]

# The instants every reader of the warehouse gets back exactly, in Spark's microseconds since
# 1970-01-01 UTC: Postgres refuses year 0 in the form the COPY writes, Arrow's CSV writer cannot
# write a year past 32767, and no Python client reads a year past 9999 (as checks._storable_instant).
_FIRST_MICROS = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
_LAST_MICROS = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z


def _reject_unstorable_timestamps(results: list[_Result], timestamps: pa.Array) -> pa.Array:
    """Reject, in `results`, every record whose Kafka timestamp the warehouse cannot keep; returns
    the timestamps with theirs NULL.

    The first check of all, so it replaces any error the value gave: the row cannot keep such a
    timestamp (not even a rejected row), and the reason is the only place it survives. One
    vectorized test per batch; only a batch with a hit is looked at row by row.
    """
    micros = timestamps.cast(_UTC_MICROS).cast(pa.int64())
    outside = pc.or_(pc.less(micros, _FIRST_MICROS), pc.greater(micros, _LAST_MICROS))
    if not pc.any(outside).as_py():
        return timestamps
    for i in pc.indices_nonzero(outside).to_pylist():
        us = micros[i].as_py()
        side = "before 0001-01-01" if us < 0 else "after 9999-12-31"
        error = (
            f"invalid timestamp: {us // 1000} ms since 1970-01-01 is {side} in UTC (kafka_timestamp is NULL)"
        )
        results[i] = (error, None)
    return pc.if_else(outside, pa.scalar(None, timestamps.type), timestamps)


NUL_IN_KEY = "invalid key: holds a NUL character, which Postgres text cannot store (raw_key keeps the bytes)"


def _reject_unstorable_kafka_columns(results: list[_Result], keys: pa.Array, headers: pa.Array) -> None:
    """Reject, in `results`, the valid records whose key or headers Postgres cannot store.

    kafka_key is text and kafka_headers jsonb: neither holds a NUL character. (A key of binary
    numbers holds NULs too: such topics need their key kept as bytes.) Both tests are vectorized
    and only the rows they hit are looked at: a NUL in the headers' JSON arrives as the escape
    \\u0000, which a header may also hold as plain text (an escaped backslash), so a hit is parsed.
    """
    nul_keys = pc.match_substring(keys.cast(pa.binary()), "\x00")
    if pc.any(nul_keys).as_py():
        for i, hit in enumerate(nul_keys.to_pylist()):
            if hit and results[i][0] is None:
                results[i] = (NUL_IN_KEY, None)
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


def _spark_ddl(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"{name} {spark_type}" for name, spark_type in columns)


CHECKED_DDL = _spark_ddl(CHECKED_COLUMNS)


@dataclass(frozen=True)
class TransformResult:
    """The source and its check; `checked` is every input row once, `valid` and `rejected` its halves.

    All three are lazy DataFrames; the halves have exactly VALID_COLUMNS and REJECTED_COLUMNS.
    """

    source: DataFrame
    check: BatchCheck

    @property
    def checked(self) -> DataFrame:
        return arrow_source(self.source).mapInArrow(self.check.batches, CHECKED_DDL)

    @property
    def valid(self) -> DataFrame:
        from pyspark.sql import functions as F

        return self.checked.where(F.col("error").isNull()).select([n for n, _ in VALID_COLUMNS])

    @property
    def rejected(self) -> DataFrame:
        from pyspark.sql import functions as F

        return self.checked.where(F.col("error").isNotNull()).select([n for n, _ in REJECTED_COLUMNS])


def arrow_source(df: DataFrame) -> DataFrame:
    """The Kafka source's columns a check needs, as a Python task receives them.

    Spark writes the headers as JSON itself: handing Python the headers' list-of-structs column cost
    more than the whole check (3.5 s per 500k records on two cores), a string costs next to nothing.
    """
    from pyspark.sql import functions as F

    def utf8(b):  # invalid UTF-8 sequences replaced by U+FFFD (headers are kept, not validated)
        return F.make_valid_utf8(b.cast("string"))

    pairs = F.transform("headers", lambda h: F.struct(h["key"].alias("key"), utf8(h["value"]).alias("value")))
    # ignoreNullFields=false keeps {"value": null} for a header without a value instead of dropping it.
    # Most records have no headers: "[]" without a JSON writer per row.
    headers = F.when(F.size("headers") > 0, F.to_json(pairs, {"ignoreNullFields": "false"})).otherwise("[]")
    return df.select(
        "key", "value", "topic", "partition", "offset", "timestamp", headers.alias("kafka_headers")
    )


def transform_orders(
    df: DataFrame, *, pipeline: str, batch_id: str, transform_version: str, max_value_bytes: int
) -> TransformResult:
    """Split Kafka order records into typed `valid` rows and `rejected` rows (see eosflow.ingest.checks)."""
    return TransformResult(df, BatchCheck(pipeline, batch_id, transform_version, max_value_bytes))
