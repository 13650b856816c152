"""The Variable `eosflow_pipelines` kept in Airflow's metadata database, as a deployment sets it in the UI or
with `airflow variables set`: an ingest run's tasks and its Spark job read it when they run (through the
Task SDK's supervisor, as a worker does), not the worker's own EOSFLOW_PIPELINES.

tests/dags/test_pipelines_variable.py parses the DAG files from it through AIRFLOW_VAR_*: an in-process
DagBag (dag.test() parses the bundle so) has no supervisor and reads no Variable from the database; the DAG
processor's parse processes do."""

from __future__ import annotations

import pytest

from eosflow_airflow.hooks.eosflow import PIPELINES_VARIABLE

pytestmark = pytest.mark.integration


@pytest.fixture
def pipelines_variable(airflow_db, monkeypatch):
    """Sets the Variable in the metadata database (never through the environment), and deletes it after."""
    from airflow.models.variable import Variable

    monkeypatch.delenv(f"AIRFLOW_VAR_{PIPELINES_VARIABLE.upper()}", raising=False)
    yield lambda value: Variable.set(PIPELINES_VARIABLE, value)
    Variable.delete(PIPELINES_VARIABLE)


def test_an_ingest_run_reads_the_variable_in_airflow_s_database_when_its_tasks_run(
    case, pipelines_variable, monkeypatch, tmp_path
):
    """About 40 s: an ingest run (plan, the Spark job, verify, announce) with dag.test(). The worker's own
    EOSFLOW_PIPELINES declares the same pipeline writing another table: a task or a Spark job that read it
    would write there, and the case's table would stay empty."""
    import psycopg
    import yaml

    from eosflow_airflow.dags import build_ingest_dag

    manifest = case.produce(300, seed=811, partitions=2)
    elsewhere = f"{case.table}_elsewhere"
    stale = tmp_path / "stale.yml"
    stale.write_text(yaml.safe_dump({"pipelines": {case.name: case.spec | {"target_table": elsewhere}}}))
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(stale))  # what dag.test()'s in-process parse reads
    pipelines_variable(str(case.config_path))

    run = build_ingest_dag(case.pipeline).test()

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) == "success", states
    assert sorted(case.event_ids()) == sorted(r.event_id for r in manifest.visible())
    assert case.violations() == []
    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        assert conn.execute("select to_regclass(%s)", (elsewhere,)).fetchone() == (None,)
