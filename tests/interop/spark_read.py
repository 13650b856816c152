"""Read Iceberg tables with Apache Spark and Iceberg's Spark runtime; run by the reader's own Python.

Run only by tests/interop/spark_iceberg.py, with the reader virtualenv's interpreter (pyspark 4.1.1,
nothing of eosflow): it must import only the standard library and pyspark.

One process is one Spark session that reads as many tables as it is asked, one after another. Everything
comes on standard input, one JSON document per line, never on the command line or in the environment (the
catalog properties may hold passwords): first the session's {"jars", "driver_memory", "scratch"}, then a
read per line, {"catalog_name", "properties", "table", "columns" (or null), "out"}. Each read's rows go to
<out>/rows (Parquet, written by Spark), and one JSON line answers it on standard output: the count(*), the
table's snapshots, Spark's and Iceberg's versions, seconds taken; or {"error": ...}, the exception's text.
Standard input closed: the session stops.

Each read is made in a new SparkSession of the running context (SparkSession.newSession: its own SQL
conf, so its own catalogs): a catalog named as an earlier read's is built again from this read's
properties, and reads nothing cached by the earlier one.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def read(spark, request: dict) -> dict:
    started = time.monotonic()
    session = spark.newSession()
    name = request["catalog_name"]
    # Catalogs are loaded on first use, from the session's SQL conf: set at run time, they never reach
    # a command line. Every property passes through as spark.sql.catalog.<name>.<key>.
    session.conf.set(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
    for key, value in request["properties"].items():
        session.conf.set(f"spark.sql.catalog.{name}.{key}", value)

    out = request["out"]
    table = ".".join(quoted(part) for part in [name, *request["table"].split(".")])
    columns = request.get("columns")
    selected = ", ".join(quoted(c) for c in columns) if columns else "*"
    session.sql(f"SELECT {selected} FROM {table}").write.parquet(f"{out}/rows")
    read_s = time.monotonic() - started
    count = session.sql(f"SELECT count(*) FROM {table}").collect()[0][0]
    snapshots = [
        {
            "snapshot_id": r["snapshot_id"],
            "parent_id": r["parent_id"],
            "operation": r["operation"],
            "committed_at": r["committed_at"].isoformat(),
        }
        for r in session.sql(
            f"SELECT snapshot_id, parent_id, operation, committed_at FROM {table}.snapshots "
            "ORDER BY committed_at"
        ).collect()
    ]
    return {
        "count": count,
        "snapshots": snapshots,
        "spark_version": spark.version,
        "iceberg_version": spark.sparkContext._jvm.org.apache.iceberg.IcebergBuild.version(),
        "read_seconds": round(read_s, 2),
    }


def main() -> int:
    # The answers' own channel: whatever else writes to standard output (Spark's JVM inherits it) goes to
    # standard error instead, so no stray line is ever taken for an answer.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    config = json.loads(sys.stdin.readline())
    started = time.monotonic()
    from pyspark.sql import SparkSession

    scratch = config["scratch"]
    # Only what is not secret goes in the builder: pyspark hands these to spark-submit as --conf
    # arguments, on the JVM's command line. Catalog properties are set per read, in its session.
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("eosflow-iceberg-reader")
        .config("spark.jars", ",".join(config["jars"]))
        .config("spark.driver.memory", config.get("driver_memory", "512m"))
        # A short run: the quick JIT alone starts sooner, as eosflow's own sessions do (spark/session.py).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", f"{scratch}/spark-local")
        .config("spark.sql.warehouse.dir", f"{scratch}/spark-warehouse")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        # Parquet's standard timestamp (not Spark's legacy INT96), which pyarrow reads as it was.
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    start_s = round(time.monotonic() - started, 2)
    for line in sys.stdin:
        try:
            answer = read(spark, json.loads(line)) | {"start_seconds": start_s}
        except Exception:  # the read's failure is its answer; the session goes on
            answer = {"error": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
