"""The spark-submit command line of an ingestion run, shared by the CLI test and the Airflow DAGs."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

from eosflow.ingest.spark_session import launch_conf
from eosflow.settings import Settings
from eosflow.stack import jars


def package(settings: Settings) -> Path:
    """Zip the eosflow package for --py-files; rebuilt on every call so it never ships stale code."""
    source = Path(__file__).resolve().parents[1]  # src/eosflow
    target = settings.state_dir / "dist" / "eosflow.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, Path("eosflow") / path.relative_to(source))
    tmp.replace(target)
    return target


def spark_env(settings: Settings) -> dict[str, str]:
    """Environment for spark-submit: Spark is the pip-installed pyspark; Python is this venv's."""
    import pyspark

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
        ",".join(str(j) for j in jars.spark_jars(settings)),
        "--py-files",
        str(package(settings)),
        *[arg for key, value in launch_conf(settings).items() for arg in ("--conf", f"{key}={value}")],
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
        str(settings.root / "spark" / "ingest_job.py"),
        "--pipeline",
        pipeline,
    ]
    if run_id:
        args += ["--run-id", run_id]
    return args + (extra or [])
