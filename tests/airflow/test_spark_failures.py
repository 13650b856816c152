"""How a failed spark-submit ends the Spark task: the job's own line, and no retry where none can help."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException

PROGRESS = "eosflow ingest: reusing the plan persisted for p:run-1 (planned): a retry reads the same ranges"


def test_refused_fenced_and_data_loss_fail_at_once_with_the_jobs_line():
    from eosflow_airflow.operators.spark import submit_failure

    refused = submit_failure(2, [PROGRESS, "eosflow ingest: REFUSED: chunk t[0] [0, 10) is ..."], "p")
    fenced = submit_failure(3, [PROGRESS, "eosflow ingest: FENCED: batch p:run-1 is fenced: ..."], "p")
    lost = submit_failure(4, ["eosflow ingest: DATA LOSS: batch p:run-1: Kafka deleted records ..."], "p")
    for failure in (refused, fenced, lost):
        assert type(failure) is AirflowFailException
    assert str(refused).startswith("REFUSED: chunk t[0] [0, 10) is ...")
    assert str(fenced).startswith("FENCED: batch p:run-1 is fenced: ...")
    assert str(lost).startswith("DATA LOSS: batch p:run-1: Kafka deleted records ...")
    assert "trigger eosflow_ingest_p with acknowledge_data_loss=true" in str(lost)


def test_other_failures_keep_their_retries_and_the_providers_error_when_the_job_said_nothing():
    from eosflow_airflow.operators.spark import submit_failure

    line = "eosflow ingest: FAILED: batch p:run-1: staged 9 rows, read 10"
    uneven = submit_failure(5, [PROGRESS, line], "p")
    assert type(uneven) is AirflowException  # retried: a transient cause is possible
    assert str(uneven).startswith("FAILED: batch p:run-1: staged 9 rows, read 10")
    assert submit_failure(1, [PROGRESS], "p") is None  # a crash after progress: not the job's verdict
    assert submit_failure(2, [], "p") is None  # spark-submit's own exit 2, before the job ran
    assert submit_failure(0, [PROGRESS], "p") is None


# -- The Spark provider's private API eosflow's hook builds on (hooks/spark_submit.py) ---------------------
def test_the_spark_providers_private_members_eosflows_hook_overrides_are_still_there():
    """EosflowSparkSubmitHook overrides `_process_spark_submit_log(itr)` and reads `_submit_sp`: private
    API of apache-airflow-providers-apache-spark (checked against 6.3.4). A provider that renames either
    fails here, not in a failed Spark task that ends on the provider's error instead of the job's line."""
    import inspect

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    assert list(inspect.signature(SparkSubmitHook._process_spark_submit_log).parameters) == ["self", "itr"]
    assert "self._process_spark_submit_log(" in inspect.getsource(SparkSubmitHook.submit)
    assert "self._submit_sp = subprocess.Popen(" in inspect.getsource(SparkSubmitHook.submit)


def test_eosflows_operator_builds_its_hook_with_every_argument_the_providers_own_passes(monkeypatch):
    """The operator's _get_hook is the provider's with eosflow's hook: the same arguments, each hook attribute
    alike (a parameter the provider adds and this one does not pass fails here), and the job's environment
    in the hook, never in the template field."""
    import inspect

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from eosflow_airflow.hooks.spark_submit import EosflowSparkSubmitHook
    from eosflow_airflow.operators.spark import EosflowSparkSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    task = EosflowSparkSubmitOperator(
        task_id="t", application="app.py", application_args=["--pipeline", "p"], env_vars={"A": "1"}
    )
    theirs, ours = SparkSubmitOperator._get_hook(task), task._get_hook()
    assert type(ours) is EosflowSparkSubmitHook
    assert {k: v for k, v in vars(ours).items() if k != "job_lines"} == vars(theirs)
    source = inspect.getsource(EosflowSparkSubmitOperator._get_hook)
    for name in list(inspect.signature(SparkSubmitHook.__init__).parameters)[1:]:
        assert f"{name}=" in source, f"the provider's hook takes {name}, eosflow's operator does not pass it"
    task._job_env = {"EOSFLOW_PG_PASSWORD": "S3CRET"}
    assert task._get_hook()._env_vars == {"EOSFLOW_PG_PASSWORD": "S3CRET"} and task.env_vars == {"A": "1"}


FAKE_SPARK_SUBMIT = """#!/bin/sh
env | grep '^EOSFLOW_PG_PASSWORD=' > "$(dirname "$0")/env.txt"
echo "26/11/27 05:00:00 INFO SparkContext: Running Spark version 4.0"
echo "eosflow ingest: reusing the plan persisted for p:run-1 (planned)" >&2
echo "eosflow ingest: FENCED: batch p:run-1 is fenced by p:run-2" >&2
exit 3
"""


def test_a_spark_submit_that_ends_fenced_fails_the_task_at_once_on_the_jobs_line(monkeypatch, tmp_path):
    """The operator's execute as Airflow runs it, with spark-submit a script on PATH (no JVM): the provider
    runs it through eosflow's hook, which keeps the job's lines and the exit code; the task fails without
    retry on the job's FENCED line, and the process got the connection's password (the template field not)."""
    import json

    import pytest

    from eosflow_airflow.operators.spark import EosflowSparkSubmitOperator

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "spark-submit").write_text(FAKE_SPARK_SUBMIT)
    (bin_dir / "spark-submit").chmod(0o755)
    monkeypatch.setenv("EOSFLOW_STATE_DIR", str(tmp_path / "state"))  # the code archive goes there
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    monkeypatch.setenv(
        "AIRFLOW_CONN_WAREHOUSE",
        json.dumps(
            {"conn_type": "postgres", "host": "h", "login": "u", "password": "pw-S3CRET", "schema": "w"}
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "b:1"}}),
    )
    task = EosflowSparkSubmitOperator(
        task_id="spark_ingest",
        application="app.py",
        application_args=["--pipeline", "p"],
        env_vars={"PATH": f"{bin_dir}:/usr/bin:/bin"},  # the user's env_vars come after Spark's PATH
    )
    with pytest.raises(AirflowFailException) as failed:
        task.execute({})
    assert str(failed.value).startswith("FENCED: batch p:run-1 is fenced by p:run-2 (exit 3, not retried")
    assert (bin_dir / "env.txt").read_text().strip() == "EOSFLOW_PG_PASSWORD=pw-S3CRET"
    assert "S3CRET" not in json.dumps(task.env_vars or {})
