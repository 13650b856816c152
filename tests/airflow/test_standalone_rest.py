"""Against a running `airflow standalone`: trigger and clear through the REST API, as tools do."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration


def test_the_ui_is_served_and_only_the_right_password_logs_in(airflow_server):
    server, _ = airflow_server
    code, page = server.request("GET", "/api/v2/monitor/health")
    assert code == 200 and page["metadatabase"]["status"] == "healthy"
    wrong = server.request("POST", "/auth/token", {"username": "admin", "password": "wrong"})
    assert wrong[0] in (401, 403)
    code, dags = server.request("GET", "/api/v2/dags", token=server.token())
    assert code == 200
    assert {d["dag_id"] for d in dags["dags"]} >= {"eosflow_backfill"}


def test_backfill_triggered_through_the_rest_api_succeeds(airflow_server):
    server, pipeline = airflow_server
    token = server.token()
    conf = {"pipeline": pipeline.name, "mode": "replay", "partitions": "all", "chunk_size": 200}
    code, run = server.request(
        "POST", "/api/v2/dags/eosflow_backfill/dagRuns", {"logical_date": None, "conf": conf}, token=token
    )
    assert code in (200, 201), run
    assert server.wait_for_run("eosflow_backfill", run["dag_run_id"]) == "success", server.log_tail()
    replays = [row for row in pipeline.ledger() if row[3] == "replay"]
    assert replays and all(r[4] == r[5] + r[6] for r in replays)
    assert pipeline.violations() == []


def test_a_cleared_ingest_task_reruns_without_duplicating_anything(airflow_server):
    server, pipeline = airflow_server
    token = server.token()
    manifest = pipeline.produce(300, seed=502, partitions=2)
    dag_id = f"eosflow_ingest_{pipeline.name}"
    code, run = server.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None}, token=token)
    assert code in (200, 201), run
    run_id = run["dag_run_id"]
    assert server.wait_for_run(dag_id, run_id) == "success", server.log_tail()
    rows, ledger = sorted(pipeline.event_ids()), pipeline.ledger()
    assert set(r.event_id for r in manifest.visible()) <= set(rows)

    code, cleared = server.request(
        "POST",
        f"/api/v2/dags/{dag_id}/clearTaskInstances",
        {
            "dag_run_id": run_id,
            "task_ids": ["spark_ingest"],
            "dry_run": False,
            "only_failed": False,
            "reset_dag_runs": True,
        },
        token=token,
    )
    assert code == 200, cleared
    time.sleep(2)
    assert server.wait_for_run(dag_id, run_id) == "success", server.log_tail()
    code, tries = server.request(
        "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/spark_ingest", token=token
    )
    assert code == 200 and tries["try_number"] >= 2  # it really ran again
    assert sorted(pipeline.event_ids()) == rows and pipeline.ledger() == ledger
    assert pipeline.violations() == []
