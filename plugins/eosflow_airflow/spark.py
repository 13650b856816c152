"""The Spark job as an Airflow task: SparkSubmitOperator on the `spark_default` connection."""

from __future__ import annotations

import os
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from eosflow import settings as settings_mod
from eosflow.ingest.spark_session import launch_conf
from eosflow.ingest.submit import spark_env


def spark_job(task_id: str, **kwargs: Any) -> dict[str, Any]:
    """Arguments shared by every eosflow spark-submit; no I/O, so DAG files can call it at import."""
    s = settings_mod.load()
    env = spark_env(s) | {k: v for k, v in os.environ.items() if k.startswith("EOSFLOW_")}
    return dict(
        task_id=task_id,
        conn_id="spark_default",
        application=str(s.root / "spark" / "ingest_job.py"),
        py_files=str(s.state_dir / "dist" / "eosflow.zip"),  # built by the plan/validate task
        jars=str(s.jars_dir / "spark" / "*.jar"),  # Spark expands the glob itself
        name=f"eosflow-{task_id}",
        env_vars=env,
        conf={"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"} | launch_conf(s),
        **kwargs,
    )


def ingest_task(pipeline_name: str, **kwargs: Any) -> SparkSubmitOperator:
    return SparkSubmitOperator(
        **spark_job(
            "spark_ingest",
            application_args=["--pipeline", pipeline_name, "--run-id", "{{ run_id }}"],
            **kwargs,
        )
    )
