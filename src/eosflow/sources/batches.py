"""Records already in memory, as a source: Arrow batches of RECORD_COLUMNS checked in one Spark task.

The same Spark path a planned read takes (`spark.range` -> `mapInArrow`, the check in the task), for
records that do not come from Kafka: the class-data-sharing training run's made-up records
(eosflow.spark.cds_training) and the records the tests build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from eosflow.sources.kafka.range_read import RECORD_SCHEMA, headers_json

# key, value, topic, partition, offset, timestamp (a datetime, or Kafka's milliseconds), headers
Record = tuple[bytes | None, bytes | None, str, int, int, datetime | int, Sequence[tuple[str, bytes | None]]]


def record_batch(records: Iterable[Record]) -> pa.RecordBatch:
    """Records as one Arrow batch of RECORD_COLUMNS, headers as a range read writes them."""
    rows = list(records)
    keys, values, topics, partitions, offsets, stamps, headers = zip(*rows, strict=True) if rows else [()] * 7
    arrays = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array(topics, pa.string()),
        pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()),
        # Milliseconds as given: a datetime cannot hold every timestamp Kafka can.
        pa.array([_millis(ts) for ts in stamps], pa.int64()).view(RECORD_SCHEMA.field("timestamp").type),
        pa.array([headers_json(h) if h else "[]" for h in headers], pa.string()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=RECORD_SCHEMA)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _millis(ts: datetime | int) -> int:
    if isinstance(ts, datetime):
        return (ts - _EPOCH) // timedelta(milliseconds=1)
    return ts


class InMemoryRecords:
    """A RecordSource (eosflow.transform) over Arrow batches already made: one task checks them all."""

    def __init__(self, spark, batches: Sequence[pa.RecordBatch]) -> None:
        self.spark = spark
        self.batches = list(batches)

    def map(self, fn: Callable[[Iterator[pa.RecordBatch]], Iterator], ddl: str):
        batches = self.batches

        def task(ids: Iterator[pa.RecordBatch]) -> Iterator:
            for _ in ids:  # the one row of the one partition
                yield from fn(iter(batches))

        return self.spark.range(0, 1, 1, 1).mapInArrow(task, ddl)
