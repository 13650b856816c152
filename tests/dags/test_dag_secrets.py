"""No secret in a DAG's serialized form or its template fields (issue 42; DESIGN, "Trust boundaries").

Every EOSFLOW_* secret is set in the environment the DAG files are parsed in, and the connections hold
passwords; the DAGs Airflow would store (serialized) and what their tasks render must hold none of them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jinja2
import pytest

DAGS = Path(__file__).resolve().parents[2] / "plugins" / "eosflow_airflow" / "dag_files"

SECRETS = {
    "EOSFLOW_PG_PASSWORD": "pg-S3CRET-a1",
    "EOSFLOW_PG_READER_PASSWORD": "reader-S3CRET-b2",
    "EOSFLOW_KAFKA_CONFIG": json.dumps({"sasl.password": "kafka-S3CRET-c3"}),
    "EOSFLOW_SCHEMA_REGISTRY_CONFIG": json.dumps({"basic.auth.user.info": "user:registry-S3CRET-d4"}),
    "EOSFLOW_KAFKA_SASL_PASSWORD": "sasl-S3CRET-e5",
    "AIRFLOW_CONN_WAREHOUSE": json.dumps(
        {"conn_type": "postgres", "host": "h", "login": "u", "password": "conn-S3CRET-f6", "schema": "w"}
    ),
    "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "b:9092", "sasl.password": "conn-S3CRET-g7"}}
    ),
    "AIRFLOW_CONN_WAREHOUSE_READONLY": json.dumps(
        {"conn_type": "postgres", "login": "r", "password": "conn-S3CRET-h8"}
    ),
    "AIRFLOW_CONN_ICEBERG_DEFAULT": json.dumps(
        {
            "conn_type": "generic",
            "host": "http://catalog.example:8181",
            "password": "conn-S3CRET-i9",
            "extra": {
                "password_property": "token",
                "s3.secret-access-key": "conn-S3CRET-j10",
                "warehouse": "w",
            },
        }
    ),
    "EOSFLOW_ICEBERG_CATALOG_PROPERTIES": json.dumps({"credential": "id:iceberg-S3CRET-k11"}),
    "AIRFLOW_CONN_EOSFLOW_SCHEMA_REGISTRY": json.dumps(
        {
            "conn_type": "eosflow_schema_registry",
            "host": "https://registry.example:8081",
            "login": "reg",
            "password": "conn-S3CRET-l12",
            "extra": {"ssl.ca.location": "/etc/ca.pem"},
        }
    ),
    "AIRFLOW_CONN_EOSFLOW_ALERTS": json.dumps(
        {"conn_type": "http", "host": "https://hooks.example", "password": "services/conn-S3CRET-m13"}
    ),
    "EOSFLOW_ALERT_WEBHOOK": "https://hooks.example/services/env-S3CRET-n14",
}
MARKERS = ["S3CRET"]  # every secret above holds it, and nothing else does


@pytest.fixture
def dagbag(monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    # The pipelines file as a deployment names it: the Variable eosflow_pipelines (no secret in it).
    monkeypatch.setenv("AIRFLOW_VAR_EOSFLOW_PIPELINES", str(DAGS.parents[2] / "pipelines.yml"))
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert bag.dags
    return bag


def _leaks(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


def test_no_secret_in_any_serialized_dag(dagbag):
    from airflow.serialization.serialized_objects import DagSerialization

    for dag_id, dag in dagbag.dags.items():
        serialized = json.dumps(DagSerialization.to_dict(dag), default=str)
        assert not _leaks(serialized), f"{dag_id}'s serialized form holds a secret"


def test_no_secret_in_any_rendered_template_field(dagbag):
    """Each task's template fields rendered (undefined names render empty), as Rendered Templates shows."""
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    rendered = 0
    for dag in dagbag.dags.values():
        for task in dag.tasks:
            if isinstance(task, MappedOperator):  # its partial kwargs are in the serialized form above
                continue
            task.render_template_fields({"run_id": "r", "params": {}}, jinja_env=env)
            fields = {f: getattr(task, f) for f in task.template_fields}
            assert not _leaks(json.dumps(fields, default=str)), f"{dag.dag_id}.{task.task_id}"
            rendered += 1
    assert rendered > 5


def test_the_spark_task_gets_its_secrets_when_it_runs_and_its_template_field_never_holds_them(
    dagbag, monkeypatch
):
    from eosflow_airflow.hooks.eosflow import EosflowHook
    from eosflow_airflow.operators.spark import EosflowSparkSubmitOperator

    task = dagbag.dags["eosflow_ingest_orders"].get_task("spark_ingest")
    assert isinstance(task, EosflowSparkSubmitOperator)
    hook = EosflowHook()
    env = task.job_env(hook, hook.settings())
    assert env["EOSFLOW_PG_PASSWORD"] == "conn-S3CRET-f6"  # the connection, read at run time
    assert env["EOSFLOW_PIPELINES"] == os.environ["AIRFLOW_VAR_EOSFLOW_PIPELINES"]  # the Variable, too
    assert json.loads(env["EOSFLOW_KAFKA_CONFIG"])["sasl.password"] == "conn-S3CRET-g7"
    # the registry's connection, not the worker's EOSFLOW_SCHEMA_REGISTRY_*: all of it, nothing mixed in
    assert env["EOSFLOW_SCHEMA_REGISTRY_URL"] == "https://registry.example:8081"
    assert json.loads(env["EOSFLOW_SCHEMA_REGISTRY_CONFIG"]) == {
        "basic.auth.user.info": "reg:conn-S3CRET-l12",
        "ssl.ca.location": "/etc/ca.pem",
    }
    iceberg = json.loads(env["EOSFLOW_ICEBERG_CATALOG_PROPERTIES"])  # the connection, not the worker's
    assert iceberg == {
        "uri": "http://catalog.example:8181",
        "token": "conn-S3CRET-i9",
        "s3.secret-access-key": "conn-S3CRET-j10",
        "warehouse": "w",
    }
    task._job_env = env
    spark = task._get_hook()
    assert spark._env_vars == env  # spark-submit's process gets them ...
    assert not _leaks(json.dumps(task.env_vars or {}))  # ... the template field does not
