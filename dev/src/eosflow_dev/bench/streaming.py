"""What a Spark user would write: Structured Streaming, Trigger.AvailableNow, foreachBatch into Postgres.

The Kafka source subscribes to the topic from the earliest offset, read_committed; each micro-batch
parses the JSON with `from_json` and appends to the table over JDBC (same driver, URL flags and
batch size as eosflow's staging). The checkpoint directory, not the warehouse, holds the offsets,
so this is at-least-once: a crash after the write and before the checkpoint writes the batch again.
The Spark session is eosflow's own (same master, jars, settings and class archive), so the two runs
differ only in what they do with it, except for the JIT: eosflow's C1-only choice suits a job whose
JVM only reads, and made this one about 10% slower, so it keeps the JVM's default compilers.

Runs as `python -m eosflow_dev.bench.streaming --topic T --table bench.X --checkpoint DIR`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from eosflow_dev.bench.measure import emit_result
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.settings import StackSettings

# The event's JSON as a Spark schema (eosflow_dev.produce.events documents the fields).
EVENT_SCHEMA = (
    "event_id string, event_type string, event_time string, order_id string, customer_id string, "
    "amount_cents bigint, currency string, schema_version int"
)


def jdbc_url(settings: StackSettings) -> str:
    # The flags eosflow's stage step uses: batched multi-row inserts, text cast to uuid/jsonb by Postgres.
    return (
        f"jdbc:postgresql://{settings.pg_host}:{settings.pg_port}/{settings.pg_database}"
        "?reWriteBatchedInserts=true&stringtype=unspecified"
    )


def run(settings: StackSettings, topic: str, table: str, checkpoint: Path) -> dict[str, float]:
    from eosflow.spark.session import get_spark

    started = time.monotonic()
    spark = get_spark(settings, "eosflow-bench-streaming", jit="")
    from pyspark.sql import functions as F

    spark_start_s = time.monotonic() - started
    props = {
        "user": settings.pg_user,
        "password": settings.pg_password,
        "driver": "org.postgresql.Driver",
        "batchsize": "10000",
    }
    url = jdbc_url(settings)
    epochs: list[int] = []

    def write_batch(batch, epoch_id: int) -> None:
        batch.write.jdbc(url, table, mode="append", properties=props)
        epochs.append(epoch_id)

    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    event = F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")
    rows = source.select("topic", "partition", "offset", "timestamp", "key", event).select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("key").cast("string").alias("kafka_key"),
        F.lit("[]").alias("kafka_headers"),
        F.col("e.event_id").alias("event_id"),
        F.col("e.event_type").alias("event_type"),
        F.to_timestamp(F.col("e.event_time")).alias("event_time"),
        F.col("e.order_id").alias("order_id"),
        F.col("e.customer_id").alias("customer_id"),
        F.col("e.amount_cents").alias("amount_cents"),
        F.col("e.currency").alias("currency"),
        F.col("e.schema_version").alias("schema_version"),
        F.lit("streaming").alias("batch_id"),
        F.lit("v1").alias("transform_version"),
    )
    query_started = time.monotonic()
    query = (
        rows.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    query_s = time.monotonic() - query_started
    spark.stop()
    return {"spark_start_s": spark_start_s, "query_s": query_s, "micro_batches": len(epochs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eosflow_dev.bench.streaming")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--checkpoint", type=Path, required=True)
    args = parser.parse_args(argv)
    emit_result(run(settings_mod.load(), args.topic, args.table, args.checkpoint))
    return 0


if __name__ == "__main__":
    sys.exit(main())
