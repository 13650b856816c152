"""The floor under every sink: eosflow's read and check of the whole topic through Spark, nothing written.

Steps 2 and 3 of `eosflow ingest` as they run for every sink (a task per range reads it with
librdkafka and checks it: eosflow.sources.kafka.read, eosflow.transform), with the checked batches
counted and dropped where a sink would write them. No sink's run can take less than this process's
time, so `eosflow ÷ read-check` is the most any sink can gain on the Postgres sink in the same bench
run (issue 28 asked the Iceberg sink for 1.5x).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition

from eosflow import pipelines
from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
from eosflow.transform import BatchCheck, transform
from eosflow_dev.bench.measure import emit_result
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.settings import StackSettings

_COUNTS = pa.schema([("n", pa.int64()), ("valid", pa.int64())])


def whole_topic(settings: StackSettings, pipeline: str, topic: str, partitions: int) -> Plan:
    """Every partition from its first offset to its end: the plan a first run of a new pipeline makes."""
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "eosflow.bench.floor"})
    try:
        ends = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
            for p in range(partitions)
        ]
    finally:
        consumer.close()
    parts = tuple(PartitionPlan(OffsetRange(topic, p, lo, hi), True) for p, (lo, hi) in enumerate(ends))
    return Plan(f"{pipeline}:floor", pipeline, "floor", parts)


def counted(check: BatchCheck):
    """The task's function: each batch checked as a sink's would be, then only counted."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        n = valid = 0
        for batch in batches:
            if batch.num_rows:
                checked = check(batch)
                n += checked.num_rows
                valid += checked.column("error").null_count  # a valid row has no error
        yield pa.RecordBatch.from_pylist([{"n": n, "valid": valid}], schema=_COUNTS)

    return run


def run(settings: StackSettings, pipeline_name: str, topic: str, partitions: int) -> dict[str, float]:
    from eosflow.sources.kafka.read import PlannedRead
    from eosflow.spark.session import get_spark

    pipeline = pipelines.load(settings, pipeline_name)
    plan = whole_topic(settings, pipeline.name, topic, partitions)
    started = time.monotonic()
    spark = get_spark(settings, f"eosflow-bench-floor-{pipeline.name}")
    spark_s = time.monotonic() - started
    result = transform(
        PlannedRead(spark, settings.kafka, plan),
        pipeline=pipeline.name,
        batch_id=plan.batch_id,
        transform_version=pipeline.transform_version,
        max_value_bytes=pipeline.max_value_bytes,
        schema=pipeline.schema,
    )
    read_started = time.monotonic()
    rows = result.map_records(counted(result.check), "n long, valid long").collect()
    return {
        "spark_start_s": spark_s,
        "read_check_s": time.monotonic() - read_started,
        "rows": float(sum(r.n for r in rows)),
        "valid": float(sum(r.valid for r in rows)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eosflow_dev.bench.read_check")
    parser.add_argument("--pipeline", required=True, help="a pipeline of EOSFLOW_PIPELINES (its declaration)")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    args = parser.parse_args(argv)
    emit_result(run(settings_mod.load(), args.pipeline, args.topic, args.partitions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
