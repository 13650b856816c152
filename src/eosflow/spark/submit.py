"""The spark-submit command line of an ingestion run, shared by the CLI test and the Airflow DAGs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from eosflow.settings import Settings
from eosflow.spark import jars, versions
from eosflow.spark.code_archive import package
from eosflow.spark.session import launch_conf

# The entry script spark-submit runs: a file of the installed package, never of a checkout.
SPARK_ENTRY = Path(__file__).resolve().with_name("task.py")


def spark_env(settings: Settings) -> dict[str, str]:
    """Environment for spark-submit: Spark is the pip-installed pyspark; Python is this venv's. Refused on a
    mixed pyspark (eosflow.spark.versions), before spark-submit starts a JVM of one version."""
    import pyspark

    versions.check(Path(pyspark.__file__).parent)
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),  # spark-submit itself is the venv's
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "EOSFLOW_HOME": str(settings.root),
    }


def spark_submit_args(
    settings: Settings, pipeline: str, run_id: str | None = None, extra: list[str] | None = None
) -> list[str]:
    """Everything after `spark-submit`: master, jars, py-files, the entry script and its arguments."""
    args = [
        "--master",
        os.environ.get("EOSFLOW_SPARK_MASTER", "local[2]"),
        "--name",
        f"eosflow-ingest-{pipeline}",
        "--jars",
        ",".join(str(j) for j in jars.check(settings)),
        "--py-files",
        str(package(settings)),
        *[arg for key, value in launch_conf(settings).items() for arg in ("--conf", f"{key}={value}")],
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
        str(SPARK_ENTRY),
        "--pipeline",
        pipeline,
    ]
    if run_id:
        args += ["--run-id", run_id]
    return args + (extra or [])
