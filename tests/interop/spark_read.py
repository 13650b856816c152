"""Read one Iceberg table with Apache Spark and Iceberg's Spark runtime; run by the reader's own Python.

Run only by tests/interop/spark_iceberg.py, with the reader virtualenv's interpreter (pyspark 4.1.1,
nothing of eosflow): it must import only the standard library and pyspark.

The request comes on standard input as JSON, never on the command line or in the environment: the catalog
properties may hold passwords. {"catalog_name", "properties", "table", "columns" (or null), "jars",
"out", "driver_memory"}. The rows go to <out>/rows (Parquet, written by Spark), the rest to
<out>/summary.json: the count(*), the table's snapshots, Spark's and Iceberg's versions, seconds taken.
"""

from __future__ import annotations

import json
import sys
import time


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def main() -> int:
    request = json.loads(sys.stdin.read())
    started = time.monotonic()
    from pyspark.sql import SparkSession

    out = request["out"]
    # Only what is not secret goes in the builder: pyspark hands these to spark-submit as --conf
    # arguments, on the JVM's command line. Catalog properties are set once the session runs (below).
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("eosflow-iceberg-reader")
        .config("spark.jars", ",".join(request["jars"]))
        .config("spark.driver.memory", request.get("driver_memory", "512m"))
        # A short run: the quick JIT alone starts sooner, as eosflow's own sessions do (spark/session.py).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", f"{out}/spark-local")
        .config("spark.sql.warehouse.dir", f"{out}/spark-warehouse")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        # Parquet's standard timestamp (not Spark's legacy INT96), which pyarrow reads as it was.
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    started_s = time.monotonic() - started

    name = request["catalog_name"]
    # Catalogs are loaded on first use, from the session's SQL conf: set at run time, they never reach
    # a command line. Every property passes through as spark.sql.catalog.<name>.<key>.
    spark.conf.set(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
    for key, value in request["properties"].items():
        spark.conf.set(f"spark.sql.catalog.{name}.{key}", value)

    table = ".".join(quoted(part) for part in [name, *request["table"].split(".")])
    columns = request.get("columns")
    selected = ", ".join(quoted(c) for c in columns) if columns else "*"
    spark.sql(f"SELECT {selected} FROM {table}").write.parquet(f"{out}/rows")
    read_s = time.monotonic() - started - started_s
    count = spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]
    snapshots = [
        {
            "snapshot_id": r["snapshot_id"],
            "parent_id": r["parent_id"],
            "operation": r["operation"],
            "committed_at": r["committed_at"].isoformat(),
        }
        for r in spark.sql(
            f"SELECT snapshot_id, parent_id, operation, committed_at FROM {table}.snapshots "
            "ORDER BY committed_at"
        ).collect()
    ]
    summary = {
        "count": count,
        "snapshots": snapshots,
        "spark_version": spark.version,
        "iceberg_version": spark.sparkContext._jvm.org.apache.iceberg.IcebergBuild.version(),
        "start_seconds": round(started_s, 2),
        "read_seconds": round(read_s, 2),
        "seconds": round(time.monotonic() - started, 2),
    }
    with open(f"{out}/summary.json", "w") as f:
        json.dump(summary, f)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
