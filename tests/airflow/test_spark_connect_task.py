"""The Spark task on a Spark Connect connection (DESIGN.md, "A warm Spark"): the job in the task's own
process, its Spark work on the stack's server, no spark-submit; failures ending the task as spark-submit's
do, and the connection's token in no message.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def _states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


@pytest.fixture
def no_spark_submit(monkeypatch):
    """A tripwire: any spark-submit this test starts fails it."""
    from eosflow_airflow.hooks.spark_submit import EosflowSparkSubmitHook

    def submit(self, *args, **kwargs):
        raise AssertionError("spark-submit ran although spark_default is a Spark Connect connection")

    monkeypatch.setattr(EosflowSparkSubmitHook, "submit", submit)


def _spark_default(monkeypatch, url: str, **fields) -> None:
    host, port = url.removeprefix("sc://").split(":")
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark_connect", "host": host, "port": int(port), **fields}),
    )


def test_an_ingest_dag_on_a_spark_connect_connection_runs_its_job_on_the_server(
    case, airflow_db, spark_connect, no_spark_submit, monkeypatch
):
    from eosflow_airflow.dags import build_ingest_dag

    monkeypatch.setenv("EOSFLOW_INLINE_MAX_OFFSETS", "0")  # through Spark, not the inline read
    _spark_default(monkeypatch, spark_connect)
    manifest = case.produce(300, seed=461, partitions=2)

    run = build_ingest_dag(case.pipeline).test()

    assert str(run.state) == "success", _states(run)
    assert sorted(case.event_ids()) == sorted(r.event_id for r in manifest.visible())
    assert case.violations() == []
    ranges = case.query(
        "select count(*) from eosflow.ledger where pipeline = %s and kind = 'data'", case.name
    )
    assert ranges == [(2,)]  # one range per partition, committed by the task's job


def test_a_server_that_does_not_answer_fails_the_task_for_a_retry_and_never_shows_the_token(
    case, airflow_db, task_outcomes, no_spark_submit, monkeypatch, capfd, caplog
):
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from eosflow_airflow.dags import build_ingest_dag

    token = "tok-461-secret"
    monkeypatch.setenv("EOSFLOW_INLINE_MAX_OFFSETS", "0")
    _spark_default(monkeypatch, "sc://127.0.0.1:1", login="etl", password=token)  # nothing listens on 1
    case.produce(50, seed=462, partitions=1)
    dag = task_outcomes.watch(build_ingest_dag(case.pipeline))
    for task in dag.tasks:
        task.retries = 0  # one try: what matters is how it failed

    run = dag.test()

    assert _states(run)["spark_ingest"] == "failed", _states(run)
    [error] = task_outcomes.failed["spark_ingest"]
    assert isinstance(error, AirflowException) and not isinstance(error, AirflowFailException), repr(error)
    message = str(error)
    assert "sc://127.0.0.1:1 did not answer" in message and "(exit 1)" in message, message
    out, err = capfd.readouterr()
    assert token not in message + out + err + caplog.text, "the token reached a message or a log"
    assert case.ledger() == []  # nothing committed
