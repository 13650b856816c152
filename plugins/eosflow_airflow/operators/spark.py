"""The Spark job as an Airflow task: spark-submit on the `spark_default` connection, the eosflow way, or,
when that connection is a Spark Connect one, the job in the task's own process on that server.

What the job runs with is decided when the task runs, never when the DAG file is parsed: its
EOSFLOW_* settings come from the `warehouse` and `kafka_default` connections (as plan and verify
read them) over the worker's own EOSFLOW_* environment, and the code archive is built from the code as
it is then. None of it is a template field: passwords and client configurations reach spark-submit's
process environment only, never the serialized DAG or Rendered Templates (docs/DESIGN.md, "Trust
boundaries"). A failure ends on the job's own line; the ones a retry cannot fix (refused, fenced, data
loss) fail without retry.
"""

from __future__ import annotations

import dataclasses
import os
import re
from datetime import timedelta
from typing import Any

import psycopg
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from eosflow import settings as settings_mod
from eosflow.spark.session import launch_conf
from eosflow.spark.submit import SPARK_ENTRY, spark_env
from eosflow_airflow.hooks.eosflow import EosflowHook
from eosflow_airflow.hooks.spark_submit import JOB_PREFIX, EosflowSparkSubmitHook
from eosflow_airflow.operators.tasks import acknowledge_hint

_OUTCOME = re.compile(r"eosflow ingest: [A-Z]+(?: [A-Z]+)*: ")  # FENCED: ..., DATA LOSS: ..., FAILED: ...
# The job's exit codes (eosflow.spark.job_main) for which the same try can only fail the same way.
NOT_RETRIED = {
    2: "a bad configuration or request does not get better on retry",
    3: "a retry would be fenced again",
    4: "the records are gone: a retry cannot read them",
}


def execution_timeout() -> timedelta:
    """How long one Spark task may run before Airflow kills it: EOSFLOW_SPARK_TIMEOUT_MINUTES, 120.

    A hung job (a broker that stops answering mid-read, a lock that is never released) would otherwise
    hold a worker slot and the pipeline's only run forever. Killing it (Airflow then kills spark-submit)
    is safe: a commit is a transaction (in Postgres, or per partition in Kafka), so nothing is left half
    committed, and the retry finds in the ledger what was.
    """
    raw = os.environ.get("EOSFLOW_SPARK_TIMEOUT_MINUTES", "").strip() or "120"
    try:
        minutes = float(raw)
    except ValueError:
        raise ValueError(f"EOSFLOW_SPARK_TIMEOUT_MINUTES must be a number of minutes; got {raw!r}") from None
    if minutes <= 0:
        raise ValueError(f"EOSFLOW_SPARK_TIMEOUT_MINUTES must be more than 0; got {raw!r}")
    return timedelta(minutes=minutes)


def spark_job(task_id: str, **kwargs: Any) -> dict[str, Any]:
    """Arguments shared by every eosflow spark-submit; no I/O, so DAG files can call it at import."""
    kwargs.setdefault("execution_timeout", execution_timeout())
    s = settings_mod.load()
    return dict(
        task_id=task_id,
        conn_id="spark_default",
        application=str(SPARK_ENTRY),
        name=f"eosflow-{task_id}",
        # No env_vars: a template field is serialized with the DAG and shown in Rendered Templates. The
        # job's environment is made when the task runs (EosflowSparkSubmitOperator.job_env).
        conf={"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"} | launch_conf(s),
        **kwargs,
    )


def submit_failure(returncode: int | None, job_lines: list[str], pipeline: str | None) -> Exception | None:
    """The exception a failed spark-submit ends the task with, or None to keep the provider's own."""
    if not returncode or not job_lines:
        return None  # not the job speaking (Spark or Python died first): the provider's output says more
    line = next((x for x in reversed(job_lines) if _OUTCOME.match(x)), None)
    if line is None and returncode in NOT_RETRIED:
        line = job_lines[-1]
    if line is None:
        return None
    message = line.removeprefix(JOB_PREFIX)
    if returncode == 4 and pipeline:
        message += " " + acknowledge_hint(pipeline)
    if returncode in NOT_RETRIED:
        return AirflowFailException(f"{message} (exit {returncode}, not retried: {NOT_RETRIED[returncode]})")
    return AirflowException(f"{message} (exit {returncode})")


class EosflowSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator with the settings and code of run time, and eosflow's failures; on a Spark Connect
    connection, the same job without spark-submit (docs/DESIGN.md "A warm Spark")."""

    _job_env: dict[str, str]  # spark-submit's environment, secrets included (set in execute, never templated)

    def execute(self, context: Any) -> None:
        from eosflow.spark import jars
        from eosflow.spark.code_archive import package

        hook = EosflowHook()
        settings = hook.settings()
        remote = hook.spark_remote(self._conn_id)  # the connection chooses, not the worker's environment
        if remote:
            return self._run_on_server(dataclasses.replace(settings, spark_remote=remote))
        self._job_env = self.job_env(hook, settings)
        self.py_files = str(package(settings))  # this version's own archive, whatever others build
        self.jars = ",".join(str(j) for j in jars.check(settings))  # the worker's, checked against the lock
        self._hook = None  # built from the values above
        try:
            return super().execute(context)
        except Exception as exc:
            spark = self._hook
            if not isinstance(spark, EosflowSparkSubmitHook):
                raise  # it failed before spark-submit ran
            failure = submit_failure(spark.returncode, spark.job_lines, self._pipeline())
            if failure is None:
                raise
            raise failure from exc

    def _run_on_server(self, settings: settings_mod.Settings) -> None:
        """The job in this process, its Spark work in a session of its own on the connection's server: its
        lines in the task's log, its exit code ending the task as spark-submit's would."""
        from eosflow.spark import job_main

        lines: list[str] = []

        def say(message: str) -> None:
            lines.append(job_main.PREFIX + message)
            self.log.info("%s", lines[-1])

        args = job_main.parse([str(a) for a in self.application_args or []])
        code = job_main.execute(args, settings, say)
        if code:
            failure = submit_failure(code, lines, self._pipeline())
            raise failure or AirflowException(f"the Spark job ended with exit {code}")

    def job_env(self, hook: EosflowHook, settings: settings_mod.Settings) -> dict[str, str]:
        """spark-submit's environment: Spark's and the worker's EOSFLOW_* settings, then the user's
        env_vars, then the same connections as plan and verify, read now (a connection changed after the
        DAG file was parsed must not send the commit to another database than the plan)."""
        worker = {k: v for k, v in os.environ.items() if k.startswith("EOSFLOW_")}
        worker.pop("EOSFLOW_SPARK_REMOTE", None)  # a spark-submit connection: the job starts its own Spark
        return {**spark_env(settings), **worker, **(self.env_vars or {}), **hook.job_env(settings)}

    def _get_hook(self) -> EosflowSparkSubmitHook:
        """The provider's SparkSubmitOperator._get_hook (6.3.4) with eosflow's hook and the job's environment.

        The environment goes to the hook only, so the template field env_vars never holds a secret (not even
        after execute). The arguments are the provider's own, attribute for attribute;
        tests/airflow/test_spark_failures.py fails when its hook takes one this call does not pass.
        """
        return EosflowSparkSubmitHook(
            conf=self.conf,
            conn_id=self._conn_id,
            files=self.files,
            py_files=self.py_files,
            archives=self._archives,
            driver_class_path=self.driver_class_path,
            jars=self.jars,
            java_class=self._java_class,
            packages=self.packages,
            exclude_packages=self.exclude_packages,
            repositories=self._repositories,
            total_executor_cores=self._total_executor_cores,
            executor_cores=self._executor_cores,
            executor_memory=self._executor_memory,
            driver_memory=self._driver_memory,
            keytab=self.keytab,
            principal=self.principal,
            proxy_user=self.proxy_user,
            name=self.name,
            num_executors=self._num_executors,
            status_poll_interval=self._status_poll_interval,
            application_args=self.application_args,
            env_vars=getattr(self, "_job_env", None) or self.env_vars,
            verbose=self._verbose,
            spark_binary=self._spark_binary,
            properties_file=self.properties_file,
            yarn_queue=self._yarn_queue,
            deploy_mode=self._deploy_mode,
            use_krb5ccache=self._use_krb5ccache,
            post_submit_commands=self.post_submit_commands,
            track_driver_via_k8s_api=self._track_driver_via_k8s_api,
            yarn_track_via_rm_api=self._yarn_track_via_rm_api,
            yarn_rm_auth=self._yarn_rm_auth,
        )

    def _pipeline(self) -> str | None:
        args = [str(a) for a in self.application_args or []]
        return args[args.index("--pipeline") + 1] if "--pipeline" in args[:-1] else None

    # Lineage for Airflow's OpenLineage provider (docs/DESIGN.md, Orchestration: "OpenLineage"): its
    # listener calls these, when it is installed and configured, around the task; the job named by the
    # provider (`<dag_id>.<task_id>`), the rest as `eosflow ingest` reports it. The errorMessage of a
    # failure is the provider's own.

    def get_openlineage_facets_on_start(self) -> Any:
        return self._operator_lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._operator_lineage(task_instance)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self._operator_lineage(None)

    def _operator_lineage(self, task_instance: Any) -> Any:
        """The task's datasets and, once it ran, its batch as the ledger recorded it (the job ran in
        spark-submit's process, or in this one on a Spark Connect server: the ledger has it either way)."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        from eosflow import pipelines
        from eosflow.ledger.ranges import batch_id_for
        from eosflow.observe.openlineage import RunLineage
        from eosflow.runners.summary import recorded
        from eosflow.spark import job_main

        args = job_main.parse([str(a) for a in self.application_args or []])
        settings = EosflowHook().settings()
        try:
            pipeline = pipelines.load(settings, args.pipeline)
        except pipelines.PipelineConfigError:
            return None  # a database entry's own name: its members are runs (mapped tasks) of their own
        lineage = RunLineage(settings, pipeline, "backfill" if args.range is not None else "ingest")
        run_facets: dict[str, Any] = {}
        output_facets: dict[str, Any] = {}
        if task_instance is not None:
            batch = batch_id_for(
                pipeline.name, args.run_id or task_instance.run_id, args.range, args.mode or "ingest"
            )
            with psycopg.connect(settings.warehouse_dsn) as conn:
                summary = recorded(conn, pipeline.name, batch)
            if summary is not None:
                run_facets, output_facets = lineage.completion(summary)
        inputs, outputs = lineage.datasets(output_facets)
        return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


def ingest_task(pipeline_name: str, **kwargs: Any) -> EosflowSparkSubmitOperator:
    return EosflowSparkSubmitOperator(
        **spark_job(
            "spark_ingest",
            application_args=["--pipeline", pipeline_name, "--run-id", "{{ run_id }}"],
            **kwargs,
        )
    )
