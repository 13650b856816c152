"""spark-submit as the Spark provider runs it, keeping what eosflow's operator needs to end a failed job on
the job's own line: the lines the job printed (`eosflow ingest: ...`) and spark-submit's exit code.

A subclass, not a patch of the provider's hook: it overrides `_process_spark_submit_log` (the provider feeds
every line of spark-submit's output through it) and reads `_submit_sp` (the process `submit` starts). Both
are the provider's private API, checked against apache-airflow-providers-apache-spark 6.3.4;
tests/airflow/test_spark_failures.py fails when either is gone or renamed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

JOB_PREFIX = "eosflow ingest: "  # how the job (eosflow.spark.job_main) prints to stderr


class EosflowSparkSubmitHook(SparkSubmitHook):
    """The provider's hook, with the job's own output lines and spark-submit's exit code kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job_lines: list[str] = []  # this submit's lines of the job itself, in order

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        # The provider logs every line and reads driver ids from them; the job's own lines are kept too.
        super()._process_spark_submit_log(self._keep_job_lines(itr))

    def _keep_job_lines(self, lines: Iterator[Any]) -> Iterator[Any]:
        for raw in lines:
            if str(raw).strip().startswith(JOB_PREFIX):
                self.job_lines.append(str(raw).strip())
            yield raw

    @property
    def returncode(self) -> int | None:
        """spark-submit's exit code, or None when it did not start or has not ended."""
        process = self._submit_sp
        return None if process is None else process.returncode
