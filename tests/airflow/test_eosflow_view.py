"""The eosflow view and metrics in a running `airflow standalone`: behind Airflow's login, read through
the read-only role, showing the pipeline's partitions, lag and invariants."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import psycopg
import pytest

from eosflow.verify import verify_pipeline
from tests.airflow.conftest import OUTSIDER, token_of

pytestmark = pytest.mark.integration


def get(server, path: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(f"{server.base}{path}")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


ROUTES = ["/eosflow/", "/eosflow/api/pipelines", "/eosflow/api/publishers", "/eosflow/metrics"]
DOCS = ["/eosflow/docs", "/eosflow/redoc", "/eosflow/openapi.json", "/eosflow/docs/oauth2-redirect"]


@pytest.mark.parametrize("path", ROUTES)
def test_a_request_without_a_login_is_refused(airflow_server, path):
    server, _ = airflow_server
    code, body = get(server, path)
    assert code == 401, body[:300]
    assert get(server, path, token="not-a-token")[0] in (401, 403)


@pytest.mark.parametrize("path", DOCS)
def test_fastapi_s_documentation_routes_are_not_served_to_anyone(airflow_server, path):
    """FastAPI serves them outside the app's login dependency: they are off, with or without a login."""
    server, _ = airflow_server
    code, body = get(server, path)
    assert code == 404, body[:300]
    assert get(server, path, token=server.token())[0] == 404


def test_a_user_who_may_read_no_dag_sees_no_pipeline_and_a_named_one_is_not_found(airflow_server):
    """`outsider` logs in but may read no DAG: no pipeline, no publisher, no metric; a pipeline named in the
    request answers 404 as an undeclared one does (403 would confirm that it exists). Admin sees it."""
    server, pipeline = airflow_server
    outsider = token_of(server, pipeline.settings, OUTSIDER)
    code, html = get(server, "/eosflow/", outsider)
    assert code == 200 and f"<h2 id='{pipeline.name}'>" not in html, html[:500]
    assert get(server, "/eosflow/api/pipelines", outsider) == (200, "[]")
    assert get(server, "/eosflow/api/publishers", outsider) == (200, "[]")
    code, metrics = get(server, "/eosflow/metrics", outsider)
    assert code == 200 and pipeline.name not in metrics
    hidden = {
        path: get(server, path, outsider)
        for path in (
            f"/eosflow/?pipeline={pipeline.name}",
            f"/eosflow/api/pipelines?pipeline={pipeline.name}",
        )
    }
    undeclared = get(server, "/eosflow/api/pipelines?pipeline=no_such_pipeline", server.token())
    assert undeclared[0] == 404
    for path, (code, body) in hidden.items():
        assert code == 404, (path, body[:300])
        assert json.loads(body) == {
            "detail": json.loads(undeclared[1])["detail"].replace("no_such_pipeline", pipeline.name)
        }
    code, states = get(server, f"/eosflow/api/pipelines?pipeline={pipeline.name}", server.token())
    assert code == 200 and [s["pipeline"] for s in json.loads(states)] == [pipeline.name]


def test_the_view_shows_partitions_lag_and_the_latest_invariants(airflow_server, monkeypatch):
    server, pipeline = airflow_server
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(pipeline.config_path))
    # The invariants alone, as the ingest DAG checks them: the server's own marts DAG may be building this
    # pipeline's marts at this moment, and two builds of one mart collide ("relation already exists").
    assert verify_pipeline(pipeline.settings, pipeline.name, marts=False).ok  # recorded in eosflow.checks
    pipeline.produce(50, seed=503, partitions=2)  # lag: produced, not ingested
    token = server.token()
    code, html = get(server, "/eosflow/", token)
    assert code == 200, html[:500]
    assert f"<h2 id='{pipeline.name}'>" in html and "invariants hold" in html
    assert (
        f"<td class='l'>{pipeline.topic}[0]</td>" in html
        and f"<td class='l'>{pipeline.topic}[1]</td>" in html
    )
    assert "unique_kafka_coordinates" in html and "<span class='ok'>pass</span>" in html
    code, states = get(server, f"/eosflow/api/pipelines?pipeline={pipeline.name}&partition=1", token)
    assert code == 200
    (mine,) = [s for s in json.loads(states) if s["pipeline"] == pipeline.name]
    assert mine["lag"] >= 50 and {r["partition"] for r in mine["ranges"]} == {1}
    code, metrics = get(server, "/eosflow/metrics", token)
    assert code == 200
    assert (
        f'eosflow_lag_records{{partition="0",pipeline="{pipeline.name}",topic="{pipeline.topic}"}}' in metrics
    )
    i1 = f'check="unique_kafka_coordinates",invariant="I1",pipeline="{pipeline.name}"'
    assert f"eosflow_check_passing{{{i1}}} 1.0" in metrics


def test_the_view_is_in_airflow_s_navigation(airflow_server):
    server, _ = airflow_server
    code, plugins = server.request("GET", "/api/v2/plugins", token=server.token())
    assert code == 200
    (eosflow,) = [p for p in plugins["plugins"] if p["name"] == "eosflow"]
    assert eosflow["external_views"][0]["href"] == "eosflow/"
    assert eosflow["fastapi_apps"][0]["url_prefix"] == "/eosflow"


def test_the_reader_role_reads_and_cannot_write(settings):
    with psycopg.connect(settings.reader_dsn, autocommit=True) as conn:
        assert conn.execute("select count(*) >= 0 from eosflow.ledger").fetchone()[0]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("delete from eosflow.positions")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("create table eosflow.intruder (x int)")
