"""Every DAG imports cleanly, is tagged, retries, and touches no network or database at import."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_every_dag_file_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"eosflow_backfill", "eosflow_ingest_orders", "eosflow_compact"} <= set(dagbag.dag_ids)


def test_one_ingest_dag_per_configured_pipeline(dagbag, settings):
    from eosflow.ingest.pipelines import load_all

    ingest = {d for d in dagbag.dag_ids if d.startswith("eosflow_ingest_")}
    assert ingest == {f"eosflow_ingest_{name}" for name in load_all(settings)}


def test_every_dag_has_tags_and_every_task_retries_at_least_twice(dagbag):
    for dag in dagbag.dags.values():
        assert dag.tags, f"{dag.dag_id} has no tags"
        for task in dag.tasks:
            assert task.retries >= 2, f"{dag.dag_id}.{task.task_id} retries {task.retries}"


def test_ingest_dags_never_overlap_and_publish_their_table_as_an_asset(dagbag):
    dag = dagbag.dags["eosflow_ingest_orders"]
    assert dag.max_active_runs == 1
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "spark_ingest", "verify"]
    outlets = dag.get_task("spark_ingest").outlets
    assert [a.name for a in outlets] == ["warehouse.raw.orders"]


def test_dag_files_do_no_network_or_database_io_at_import(monkeypatch):
    import psycopg
    from airflow.dag_processing.dagbag import DagBag

    def refuse(*args, **kwargs):
        raise AssertionError(f"I/O at DAG import: {args[:2]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(psycopg, "connect", refuse)
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert bag.dag_ids


def test_both_dags_run_spark_through_eosflows_operator(dagbag):
    from eosflow_airflow.spark import EosflowSparkSubmitOperator

    ingest = dagbag.dags["eosflow_ingest_orders"].get_task("spark_ingest")
    chunk = dagbag.dags["eosflow_backfill"].get_task("spark_chunk")
    assert isinstance(ingest, EosflowSparkSubmitOperator)
    assert chunk.operator_class is EosflowSparkSubmitOperator  # a mapped task


def test_ingest_dags_acknowledge_data_loss_only_when_asked(dagbag):
    param = dagbag.dags["eosflow_ingest_orders"].params.get_param("acknowledge_data_loss")
    assert param.value is False and param.schema["type"] == "boolean" and param.description


def test_compaction_runs_hourly_and_never_twice_at_once(dagbag):
    from datetime import timedelta

    dag = dagbag.dags["eosflow_compact"]
    assert dag.max_active_runs == 1
    assert dag.timetable.delta == timedelta(hours=1)
    assert [t.task_id for t in dag.tasks] == ["compact"]
