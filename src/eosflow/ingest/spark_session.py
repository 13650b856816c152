"""One way to get a SparkSession, in-process (`eosflow ingest`) or under spark-submit."""

from __future__ import annotations

import os

from eosflow.settings import Settings
from eosflow.stack import jars


def get_spark(settings: Settings, app_name: str):
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    submitted = SparkConf()  # under spark-submit this already holds --master, --jars, ...
    if not submitted.contains("spark.master"):
        builder = builder.master(os.environ.get("EOSFLOW_SPARK_MASTER", "local[2]"))
    if not submitted.contains("spark.jars"):
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars.spark_jars(settings)))
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark
