"""A class-data-sharing archive for Spark's JVM, so a run's Spark session starts seconds sooner.

Most of a Spark session's start is the JVM reading, parsing and verifying thousands of classes from
hundreds of jars. HotSpot's AppCDS records the classes one training run loaded
(`-XX:ArchiveClassesAtExit`); later JVMs map them from that file (`-XX:SharedArchiveFile`). Measured on
the 2-core machines here: session start 8.7 -> 4.9 s, the first job 3.6 -> 1.9 s.

`eosflow stack fetch` (so `make setup`) records the archive once, by a Spark job shaped like an ingestion
run but needing neither Kafka nor Postgres. The JVM checks the archive against its own version and
classpath (jar sizes and times) and silently starts without it when they differ; a fingerprint of
the same things makes `fetch` record it again after a JDK or Spark change.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from eosflow.settings import Settings

_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a stale or missing archive is not worth a warning
# Bump when the training run's shape changes, so `fetch` records the archive again.
_TRAINING_SHAPE = "3: python checks in mapInArrow, C1 only"


def archive(settings: Settings) -> Path:
    return settings.jars_dir.parent / "spark-cds" / "spark.jsa"


def use_options(settings: Settings) -> str:
    """JVM options that start from the archive; harmless (and silent) while there is none."""
    return f"-XX:SharedArchiveFile={archive(settings)} {_QUIET}"


def fingerprint(settings: Settings) -> str:
    """What the archive depends on: the JDK, the Spark install and the connector jars."""
    import pyspark

    java = shutil.which(
        "java",
        path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin") + os.pathsep + os.environ.get("PATH", ""),
    )
    version = subprocess.run([java or "java", "-version"], capture_output=True, text=True).stderr
    spark_jars = Path(pyspark.__file__).parent / "jars"
    parts = [
        _TRAINING_SHAPE,
        os.path.realpath(java or "java"),
        version,
        pyspark.__version__,
        str(spark_jars.stat().st_mtime_ns),
        *sorted(p.name for p in (settings.jars_dir / "spark").glob("*.jar")),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def record(settings: Settings, log=print) -> Path:
    """Record the archive unless an up-to-date one exists; a failure only costs the speed-up."""
    target = archive(settings)
    stamp = target.with_suffix(".fingerprint")
    expected = fingerprint(settings)
    if target.exists() and stamp.exists() and stamp.read_text().strip() == expected:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    log(f"recording Spark's class-data-sharing archive (once, ~40 s; every Spark start is faster): {target}")
    done = subprocess.run(
        [sys.executable, "-m", "eosflow.ingest.spark_cds", str(tmp)], capture_output=True, text=True
    )
    if done.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        log(
            f"could not record the archive (exit {done.returncode}); Spark starts without it:\n"
            + done.stderr[-1500:]
        )
        return target
    tmp.replace(target)  # atomic: a JVM starting now maps either the old file or the new one
    stamp.write_text(expected + "\n")
    return target


def _training_run(out: Path) -> None:
    """A small ingestion-shaped job (a Python task checking Arrow batches of Kafka records), then exit."""
    from datetime import datetime

    from eosflow import settings as settings_mod
    from eosflow.ingest import spark_session
    from eosflow.ingest.transform import BatchCheck, arrow_source
    from eosflow.produce import events
    from eosflow.schema.declaration import parse_schema

    recording = f"-XX:ArchiveClassesAtExit={out} {_QUIET}"
    spark = spark_session.get_spark(settings_mod.load(), "eosflow-cds-training", class_archive=recording)
    # The producer's own events, one in ten replaced by a value the checks reject.
    rows = [
        (e.key, e.value if i % 10 else b"not json", "t", i % 2, i, datetime(2026, 1, 1), 0, [("h", b"v")])
        for i, e in enumerate(events.generate(seed=1, count=2000))
    ]
    schema = (
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
        "timestampType int, headers array<struct<key: string, value: binary>>"
    )
    declared = parse_schema(
        {
            "columns": [
                {"name": "event_id", "type": "uuid", "required": True},
                {"name": "event_time", "type": "timestamptz"},
                {"name": "amount_cents", "type": "bigint", "min": 1},
                {"name": "currency", "type": "text", "pattern": "^[A-Z]{3}"},
                {"name": "order_id", "type": "text"},
            ]
        },
        "cds training",
    )
    check = BatchCheck(
        pipeline="p", batch_id="b", transform_version="v", max_value_bytes=4096, schema=declared
    )

    def count(batches):
        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"n": [sum(check(b).num_rows for b in batches)]})

    source = arrow_source(spark.createDataFrame(rows, schema))
    counted = source.mapInArrow(count, "n long").collect()
    assert sum(r.n for r in counted) == len(rows), counted
    spark.stop()


if __name__ == "__main__":
    _training_run(Path(sys.argv[1]))
