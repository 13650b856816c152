"""Against a running `airflow standalone`: trigger and clear through the REST API, as tools do."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.integration


def test_the_ui_is_served_and_only_the_right_password_logs_in(airflow_server):
    server, pipeline = airflow_server
    code, page = server.request("GET", "/api/v2/monitor/health")
    assert code == 200 and page["metadatabase"]["status"] == "healthy"
    wrong = server.request("POST", "/auth/token", {"username": "admin", "password": "wrong"})
    assert wrong[0] in (401, 403)
    code, dags = server.request("GET", "/api/v2/dags", token=server.token())
    assert code == 200
    assert {d["dag_id"] for d in dags["dags"]} >= {f"eosflow_backfill_{pipeline.name}"}


def test_a_backfill_dry_run_triggered_through_the_rest_api_succeeds_and_writes_nothing(airflow_server):
    """A tool triggering the backfill DAG with its conf over REST. A dry run: it validates the request
    and lists the chunks in the standalone, and commits nothing (the browser test runs a replay for real)."""
    server, pipeline = airflow_server
    token = server.token()
    ledger = pipeline.ledger()
    conf = {
        "mode": "replay",
        "partitions": "all",
        "chunk_size": 200,
        "dry_run": True,
    }
    dag_id = f"eosflow_backfill_{pipeline.name}"  # the pipeline's own: its DAG is the right to replay it
    code, run = server.request(
        "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf}, token=token
    )
    assert code in (200, 201), run
    assert run["conf"] == conf, run
    assert server.wait_for_run(dag_id, run["dag_run_id"]) == "success", server.log_tail()
    assert pipeline.ledger() == ledger
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


def _asset_events(server, run_id: str) -> list[dict]:
    return server.asset_events(f"source_run_id={quote(run_id)}&limit=100")["asset_events"]


def _trigger(server, dag_id: str) -> str:
    code, run = server.request(
        "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None}, token=server.token()
    )
    assert code in (200, 201), run
    assert server.wait_for_run(dag_id, run["dag_run_id"]) == "success", server.log_tail()
    return run["dag_run_id"]


def test_a_run_that_commits_rows_schedules_the_marts_dag_and_an_idle_run_emits_nothing(airflow_server):
    """Three DAG runs through the scheduler, one after the other (about a minute on two busy cores): the
    ingest that commits, the marts run its asset event schedules, and the idle ingest that must emit none."""
    server, pipeline = airflow_server
    ingest, marts = f"eosflow_ingest_{pipeline.name}", f"eosflow_marts_{pipeline.name}"
    manifest = pipeline.produce(200, seed=517, partitions=2)
    committed = _trigger(server, ingest)
    (event,) = _asset_events(server, committed)
    assert event["uri"].startswith("postgres://") and event["uri"].endswith(f"/raw/{pipeline.name}")
    assert event["source_task_id"] == "announce" and event["extra"]["rows_written"] >= 200

    # The scheduler starts the marts DAG on that event, and the mart holds the new events.
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        code, body = server.request(
            "GET", f"/api/v2/dags/{marts}/dagRuns?limit=100&order_by=-run_after", token=server.token()
        )
        assert code == 200, body
        after = [r for r in body["dag_runs"] if r["run_after"] >= event["timestamp"]]
        if after and after[0]["state"] in ("success", "failed"):
            assert after[0]["state"] == "success" and after[0]["run_type"] == "asset_triggered"
            break
        time.sleep(3)
    else:
        raise AssertionError(f"no run of {marts} after the asset event in 240 s:\n{server.log_tail()}")
    schema = f"analytics_{pipeline.name}"
    ids = {str(r[0]) for r in pipeline.query(f"select event_id from {schema}.order_events")}
    assert {r.event_id for r in manifest.visible()} <= ids

    # Nothing new in Kafka: the next run commits nothing and emits no event.
    idle = _trigger(server, ingest)
    assert _asset_events(server, idle) == []
    code, tis = server.request(
        "GET", f"/api/v2/dags/{ingest}/dagRuns/{quote(idle)}/taskInstances/announce", token=server.token()
    )
    assert code == 200 and tis["state"] == "skipped"


def test_the_spark_task_reports_its_datasets_and_committed_batch_through_airflows_openlineage_provider(
    airflow_server, openlineage_file
):
    """Airflow's OpenLineage provider (its listener, file transport) asks the Spark task for its lineage:
    the topic in, the table out with its schema and column lineage, and on COMPLETE the batch the ledger
    recorded (eosflow's facet) and the rows written. Each event's own part is validated against the spec."""
    from tests.unit.observe.test_openlineage import _validate_core

    server, pipeline = airflow_server
    ingest = f"eosflow_ingest_{pipeline.name}"
    pipeline.produce(30, seed=519, partitions=2)
    run_id = _trigger(server, ingest)

    job = f"{ingest}.spark_ingest"
    deadline = time.monotonic() + 60  # the provider sends from a process of its own, after the task
    while True:
        lines = openlineage_file.read_text().splitlines() if openlineage_file.exists() else []
        events = [e for e in map(json.loads, lines) if e["job"]["name"] == job]
        starts = [e for e in events if _dag_run_id(e) == run_id and e["eventType"] == "START"]
        ours = [e for e in events if starts and e["run"]["runId"] == starts[0]["run"]["runId"]]
        if any(e["eventType"] == "COMPLETE" for e in ours) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert [e["eventType"] for e in ours] == ["START", "COMPLETE"], [e["eventType"] for e in events]
    sent = openlineage_file.read_text()  # the stack's password is "eosflow": look for its forms
    assert f":{pipeline.settings.pg_password}@" not in sent and "password" not in sent.lower()
    start, complete = ours
    for event in ours:
        _validate_core(event)
        assert event["job"]["namespace"] == "team-airflow"
        assert [d["name"] for d in event["inputs"]] == [pipeline.topic]
        (output,) = event["outputs"]
        assert output["name"] == f"warehouse.{pipeline.table}"
        assert "event_id" in {f["name"] for f in output["facets"]["schema"]["fields"]}
        assert "columnLineage" in output["facets"]
    facet = complete["run"]["facets"]["eosflow_run"]
    assert facet["batchId"] == f"{pipeline.name}:{run_id}" and facet["outcome"] == "committed"
    assert sum(r["written"] for r in facet["ranges"]) == 30
    assert complete["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 30
    assert "eosflow_run" not in start["run"]["facets"]


def _dag_run_id(event: dict) -> str | None:
    """The Airflow DAG run an event of the OpenLineage provider belongs to (its `airflow` run facet)."""
    return event["run"]["facets"].get("airflow", {}).get("dagRun", {}).get("run_id")
