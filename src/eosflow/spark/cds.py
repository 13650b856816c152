"""A class-data-sharing archive for Spark's JVM, so a run's Spark session starts seconds sooner.

Most of a Spark session's start is the JVM reading, parsing and verifying thousands of classes from
hundreds of jars. HotSpot's AppCDS records the classes one training run loaded
(`-XX:ArchiveClassesAtExit`); later JVMs map them from that file (`-XX:SharedArchiveFile`). Measured on
the 2-core machines here: session start 8.7 -> 4.9 s, the first job 3.6 -> 1.9 s.

`eosflow stack fetch --spark-archive` (so `make test`, `bench`, `lab`, `soak`, `airflow`; not `make demo`,
whose small plans never start a Spark session) records the archive once, by a Spark job shaped like an
ingestion run but needing neither Kafka nor Postgres. The JVM checks the archive against its own version and
classpath (jar sizes and times) and silently starts without it when they differ; a fingerprint of
the same things makes `fetch --spark-archive` record it again after a JDK or Spark change.
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

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a stale or missing archive is not worth a warning
# Bump when the training run's shape changes, so `fetch` records the archive again.
_TRAINING_SHAPE = "4: python checks in mapInArrow over spark.range, C1 only"


def archive(settings: Settings) -> Path:
    return settings.jars_dir.parent / "spark-cds" / "spark.jsa"


def use_options(settings: Settings) -> str:
    """JVM options that start from the archive; harmless (and silent) while there is none."""
    return f"-XX:SharedArchiveFile={archive(settings)} {QUIET}"


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
        [sys.executable, "-m", "eosflow.spark.cds_training", str(tmp)], capture_output=True, text=True
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
