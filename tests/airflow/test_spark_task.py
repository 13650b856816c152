"""The Spark task and the plan task under Airflow (issue 13, item 8), in-process with dag.test().

The Spark task takes its settings from the connections when it runs, ships the code as it is then,
and fails without retry, with eosflow's own line, when a retry cannot help (fenced, data loss).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pytest

from eosflow.ledger import positions
from eosflow.runners import job

pytestmark = pytest.mark.integration


def _states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def _tries(run, task_id: str) -> int:
    return next(ti.try_number for ti in run.get_task_instances() if ti.task_id == task_id)


def test_the_spark_task_uses_the_connections_as_they_are_when_it_runs(case, airflow_db, monkeypatch):
    from eosflow_airflow.dags import build_ingest_dag

    manifest = case.produce(200, seed=801, partitions=2)
    current = os.environ["AIRFLOW_CONN_WAREHOUSE"]
    # The DAG is parsed while the worker's EOSFLOW_* settings and the `warehouse` connection point at
    # a port where no database is ...
    monkeypatch.setenv("EOSFLOW_PG_PORT", "1")
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps(json.loads(current) | {"port": 1}))
    dag = build_ingest_dag(case.pipeline)
    # ... then the connection is corrected; the environment stays stale. Every task must follow the
    # connection: plan and verify do, so must the Spark job, or it would commit somewhere else.
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", current)

    run = dag.test()
    assert str(run.state) == "success", _states(run)
    assert sorted(case.event_ids()) == sorted(r.event_id for r in manifest.visible())
    assert case.violations() == []


def test_a_kafka_default_connection_requiring_sasl_reaches_the_plan_the_spark_job_and_verify(
    case, airflow_db, monkeypatch
):
    from eosflow_airflow.dags import build_ingest_dag

    manifest = case.produce(150, seed=802, partitions=2)
    s = case.settings
    # The whole client configuration in the connection's extra, as the Kafka provider keeps it: the
    # stack's SASL listener accepts no client without these credentials.
    secured = {
        "bootstrap.servers": s.sasl_bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "eosflow",
        "sasl.password": s.kafka_sasl_password,
    }
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": secured}))
    dag = build_ingest_dag(case.pipeline)

    run = dag.test()

    assert str(run.state) == "success", _states(run)
    assert sorted(case.event_ids()) == sorted(r.event_id for r in manifest.visible())
    assert case.violations() == []


def test_a_fenced_spark_task_fails_once_with_eosflows_fenced_line(case, airflow_db, task_outcomes):
    from airflow.sdk.exceptions import AirflowFailException

    from eosflow_airflow.dags import build_ingest_dag

    case.produce(300, seed=802, partitions=2)
    dag = task_outcomes.watch(build_ingest_dag(case.pipeline))
    when = datetime.now(UTC).replace(microsecond=0)
    run_id = f"manual__{when.isoformat()}"  # how dag.test() names the run of this logical date
    job.prepare(case.settings, case.name, run_id, log=lambda m: None)  # the run's plan, from offset 0
    assert case.ingest().outcome == positions.COMMITTED  # another run commits: the positions move on
    ledger = case.ledger()

    run = dag.test(logical_date=when, run_after=when)
    assert run.run_id == run_id
    assert _states(run) == {
        "plan": "success",
        "spark_ingest": "failed",
        "verify": "upstream_failed",
        "announce": "upstream_failed",
    }
    assert _tries(run, "spark_ingest") == 1 and dict(task_outcomes.retried) == {}
    [error] = task_outcomes.failed["spark_ingest"]
    assert isinstance(error, AirflowFailException), repr(error)
    message = str(error)
    assert message.startswith(f"FENCED: batch {case.name}:") and "is fenced" in message, message
    assert "\n" not in message
    assert case.ledger() == ledger  # nothing written


def test_data_loss_fails_the_plan_once_and_a_run_acknowledging_it_records_the_loss(
    case, airflow_db, task_outcomes, delete_records
):
    from airflow.sdk.exceptions import AirflowFailException

    from eosflow_airflow.dags import build_ingest_dag

    case.produce(150, seed=803, partitions=1)
    assert case.ingest(max_records=40).outcome == positions.COMMITTED
    delete_records(case, 0, 100)  # retention took [40, 100) before the pipeline read it
    dag = task_outcomes.watch(build_ingest_dag(case.pipeline))

    refused = dag.test()  # as a scheduled run: nothing acknowledged
    states = _states(refused)
    assert states == {
        "plan": "failed",
        "spark_ingest": "upstream_failed",
        "verify": "upstream_failed",
        "announce": "upstream_failed",
    }
    assert _tries(refused, "plan") == 1 and dict(task_outcomes.retried) == {}
    [error] = task_outcomes.failed["plan"]
    assert isinstance(error, AirflowFailException), repr(error)
    message = str(error)
    assert f"{case.topic}[0] [40, 100)" in message and "acknowledge_data_loss=true" in message, message
    assert "\n" not in message
    assert [row[1:4] for row in case.ledger()] == [(0, 40, "data")]

    accepted = dag.test(run_conf={"acknowledge_data_loss": True})
    assert str(accepted.state) == "success", _states(accepted)
    assert [row[1:4] for row in case.ledger()] == [(0, 40, "data"), (40, 100, "lost"), (100, 150, "data")]
    assert len(case.event_ids()) == 40 + 50
    assert case.violations() == []


def test_a_bad_configuration_fails_the_plan_once_with_its_reason(case, airflow_db, task_outcomes):
    from airflow.sdk.exceptions import AirflowFailException

    from eosflow_airflow.dags import build_ingest_dag

    dag = task_outcomes.watch(build_ingest_dag(case.pipeline))  # its topic was never created
    run = dag.test()
    assert _states(run)["plan"] == "failed"
    assert _tries(run, "plan") == 1 and dict(task_outcomes.retried) == {}
    [error] = task_outcomes.failed["plan"]
    assert isinstance(error, AirflowFailException), repr(error)
    assert str(error).startswith(f"topic '{case.topic}' does not exist"), str(error)


def test_a_backfill_with_more_chunks_than_airflow_maps_is_refused_naming_a_size_that_fits(
    case, airflow_db, task_outcomes, monkeypatch
):
    from airflow.sdk.exceptions import AirflowFailException

    from eosflow_airflow.dags import build_backfill_dag

    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "4")
    case.produce(100, seed=403, partitions=1)
    case.ingest()
    dag = task_outcomes.watch(build_backfill_dag(case.pipeline))
    run = dag.test(
        run_conf={"mode": "replay", "partitions": "0", "from_offset": 0,
                  "to_offset": 100, "chunk_size": 10}
    )  # fmt: skip
    assert _states(run)["validate"] == "failed" and _tries(run, "validate") == 1
    [error] = task_outcomes.failed["validate"]
    assert isinstance(error, AirflowFailException), repr(error)
    message = str(error)
    assert "10 chunks" in message and "at most 4" in message and "chunk_size of at least 25" in message
