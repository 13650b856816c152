"""The Airflow Variable `eosflow_pipelines`: the path of the pipelines file on the workers (docs/DESIGN.md,
"In a team's own Airflow"). The DAG files are parsed from the file it names, the tasks and the Spark job read
it when they run, and without it the worker's EOSFLOW_PIPELINES stands (the stand-alone CLI's setting).

The Variable is a real one: AIRFLOW_VAR_EOSFLOW_PIPELINES, Airflow's environment secrets backend, asked
before its metadata database (tests/airflow/test_pipelines_variable.py sets it there).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "plugins" / "eosflow_airflow" / "dag_files"


def _renamed_orders(tmp_path: Path, name: str) -> Path:
    """The project's orders pipeline alone, under another name, in a file of its own."""
    body = yaml.safe_load((ROOT / "pipelines.yml").read_text())
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump({"pipelines": {name: body["pipelines"]["orders"]}}, sort_keys=False))
    return path


def test_the_dags_are_made_from_the_file_the_variable_names_not_the_worker_s_environment(
    tmp_path, monkeypatch
):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("EOSFLOW_PIPELINES", str(ROOT / "pipelines.yml"))  # the worker's: the fallback only
    monkeypatch.setenv("AIRFLOW_VAR_EOSFLOW_PIPELINES", str(_renamed_orders(tmp_path, "from_variable")))
    bag = DagBag(dag_folder=str(DAGS))

    assert bag.import_errors == {}
    assert {"eosflow_ingest_from_variable", "eosflow_backfill_from_variable"} <= set(bag.dag_ids)
    assert "eosflow_marts_from_variable" in bag.dag_ids and "eosflow_health" in bag.dag_ids
    assert not [d for d in bag.dag_ids if d.endswith("_orders")], sorted(bag.dag_ids)
    assert bag.dags["eosflow_health"].get_task("pipeline_health").op_args[0].keys() == {"from_variable"}


def test_without_the_variable_the_worker_s_eosflow_pipelines_stands(tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.delenv("AIRFLOW_VAR_EOSFLOW_PIPELINES", raising=False)
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(_renamed_orders(tmp_path, "from_environment")))
    bag = DagBag(dag_folder=str(DAGS))

    assert bag.import_errors == {}
    assert "eosflow_ingest_from_environment" in bag.dag_ids


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("pipelines:\n  orders:\n    topics: [orders]\n", "the file's YAML goes in the file"),
        ("pipelines.yml", "absolute path of the pipelines file"),
    ],
)
def test_a_variable_holding_yaml_or_a_relative_path_is_refused_naming_the_variable(value, said, monkeypatch):
    """The file's YAML or a path the DAG processor and the workers would each read from their own working
    directory: every DAG file's import error says what the Variable must hold (no pipeline can be trusted)."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("AIRFLOW_VAR_EOSFLOW_PIPELINES", value)
    bag = DagBag(dag_folder=str(DAGS))

    assert bag.import_errors, bag.dag_ids
    for error in bag.import_errors.values():
        assert "the Airflow Variable eosflow_pipelines must hold the absolute path" in error and said in error


def test_a_task_and_its_spark_job_read_the_variable_when_they_run(tmp_path, monkeypatch):
    """The DAG parsed with one file; the Variable changed before the task runs: the task's settings, the
    pipeline it loads and the Spark job's environment all follow the Variable as it is then."""
    from eosflow import pipelines
    from eosflow_airflow.hooks.eosflow import EosflowHook

    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps({"conn_type": "postgres", "host": "h"}))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": {}}))
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(ROOT / "pipelines.yml"))
    at_run_time = _renamed_orders(tmp_path, "at_run_time")
    monkeypatch.setenv("AIRFLOW_VAR_EOSFLOW_PIPELINES", str(at_run_time))

    hook = EosflowHook()
    settings = hook.settings()
    assert settings.pipelines_path == at_run_time
    assert pipelines.load(settings, "at_run_time").name == "at_run_time"
    assert hook.job_env(settings)["EOSFLOW_PIPELINES"] == str(at_run_time)
    assert hook.reader_settings().pipelines_path == at_run_time  # the view's

    monkeypatch.delenv("AIRFLOW_VAR_EOSFLOW_PIPELINES")  # not defined: the worker's environment stands
    assert hook.settings().pipelines_path is None
    assert "EOSFLOW_PIPELINES" not in hook.job_env()  # the worker's own reaches the job (job_env's caller)
    assert pipelines.load(hook.settings(), "orders").name == "orders"
