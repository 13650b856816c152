"""After a real ingest DAG run, Airflow's metadata database holds no secret (issue 42).

The DAG is built and run with secrets in the environment (markers the run does not need) and the
warehouse's real password in its connection; neither the serialized DAG nor the Spark task's Rendered
Templates may hold any of them.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration

MARKER = "S3CRET-run"


def test_a_dag_run_leaves_no_secret_in_the_serialized_dag_or_rendered_templates(
    case, airflow_db, monkeypatch
):
    """About a minute: a whole ingest DAG run (plan, spark-submit, dbt's verify), as Airflow stores it."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from eosflow_airflow.dags import build_ingest_dag

    monkeypatch.setenv("EOSFLOW_PG_READER_PASSWORD", f"reader-{MARKER}")
    monkeypatch.setenv("EOSFLOW_KAFKA_SASL_PASSWORD", f"sasl-{MARKER}")
    monkeypatch.setenv("EOSFLOW_SCHEMA_REGISTRY_CONFIG", json.dumps({"basic.auth.user.info": f"u:{MARKER}"}))
    case.produce(50, seed=4201)
    dag = build_ingest_dag(case.pipeline)
    run = dag.test()
    assert str(run.state) == "success"
    assert len(case.event_ids()) == 50

    with create_session() as session:
        stored = session.scalars(select(SerializedDagModel).where(SerializedDagModel.dag_id == dag.dag_id))
        serialized = [json.dumps(row.data, default=str) for row in stored]
        rendered = {
            row.task_id: row.rendered_fields
            for row in session.scalars(
                select(RenderedTaskInstanceFields).where(RenderedTaskInstanceFields.dag_id == dag.dag_id)
            )
        }
    assert serialized, "dag.test() stores the serialized DAG"
    assert "spark_ingest" in rendered, "dag.test() stores each task's Rendered Templates"
    for text in [*serialized, json.dumps(rendered, default=str)]:
        assert MARKER not in text
        # The connections' values (the stack's real password among them) reach spark-submit under these
        # names only: neither name may be stored.
        assert "EOSFLOW_PG_PASSWORD" not in text and "EOSFLOW_KAFKA_CONFIG" not in text
