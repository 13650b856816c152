"""One way to get a SparkSession, in-process (`eosflow ingest`) or under spark-submit."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from eosflow.settings import Settings
from eosflow.spark import cds, jars, versions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A run's JVM lives for one batch, so it pays for its JIT compiler and keeps little of what it bought:
# the C2 compiler spent 8-10 CPU-seconds of a 500k-record run on two cores compiling code the run
# then barely used. C1 alone compiles fast enough for Spark's share of the work (reading Kafka and
# handing Arrow batches to Python): Spark starts 1.2 s sooner and the run uses a third less JVM CPU.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def launch_conf(
    settings: Settings, class_archive: str | None = None, jit: str = JVM_OPTIONS
) -> dict[str, str]:
    """Settings the JVM must have when it starts: a spark-submit passes them as --conf
    (eosflow.spark.submit, the Airflow operator); an in-process session sets them on its builder.

    The driver starts from the class-data-sharing archive (eosflow.spark.cds) unless
    `class_archive` says otherwise; no file is touched here, so DAG files may call this at import.
    `jit` is eosflow's compiler choice; "" leaves the JVM's own (a Spark job of another shape).
    """
    conf = {"spark.driver.extraJavaOptions": f"{jit} {class_archive or cds.use_options(settings)}".strip()}
    if jit:
        conf["spark.executor.extraJavaOptions"] = jit
    return conf


def get_spark(
    settings: Settings,
    app_name: str,
    class_archive: str | None = None,
    jit: str = JVM_OPTIONS,
    extra: dict[str, str] | None = None,
) -> SparkSession:
    if settings.spark_remote:  # a warm server: a session of the run's own there, never a local JVM
        from eosflow.spark import connect

        return connect.open_session(settings, app_name)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:  # a stream's micro-batches, or several runs in one process: one JVM for all
        return active
    versions.check()  # never a JVM of one version under Python files of another
    builder = SparkSession.builder.appName(app_name)
    submitted = SparkConf()  # under spark-submit this already holds --master, --jars, ...
    if not submitted.contains("spark.master"):
        builder = builder.master(os.environ.get("EOSFLOW_SPARK_MASTER", "local[2]"))
    if not submitted.contains("spark.pyspark.python"):
        # The staging tasks run Python (psycopg, pyarrow, eosflow): this interpreter's, not the first
        # python3 on PATH. An in-process SparkContext takes its workers' Python from the environment.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in launch_conf(settings, class_archive, jit).items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
    for key, value in (extra or {}).items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
    if not submitted.contains("spark.jars"):
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars.check(settings)))
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark
