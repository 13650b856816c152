"""Who sees what in the eosflow view: a pipeline only for a user Airflow's auth manager lets read its ingest
DAG, a publisher only for one who may read its publish DAG; one named that the user may not read is a 404,
the same as one never declared. The auth manager here is a stub (the decision is Airflow's, the filtering
is ours); tests/airflow/test_eosflow_view.py runs the same routes behind a real Airflow login."""

from __future__ import annotations

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

from eosflow.pipelines import load_all
from eosflow_airflow.view import app, chosen, permitted
from tests.orders import PIPELINES_YML


class StubAuthManager:
    """Answers as an auth manager with per-DAG rights would: `allowed` DAG ids per user name."""

    def __init__(self, allowed: dict[str, set[str]]) -> None:
        self.allowed = allowed
        self.asked: list[tuple[str, frozenset[str], str, str | None]] = []

    def filter_authorized_dag_ids(self, *, dag_ids, user, method="GET", team_name=None) -> set[str]:
        self.asked.append((user, frozenset(dag_ids), method, team_name))
        return set(dag_ids) & self.allowed.get(user, set())


def ingest(name: str) -> str:
    return f"eosflow_ingest_{name}"


NAMES = ["orders", "clicks", "orders_roundtrip"]


def test_a_user_sees_only_the_pipelines_whose_ingest_dag_they_may_read():
    auth = StubAuthManager(
        {"ana": {ingest("orders"), "eosflow_backfill_clicks"}, "root": set(map(ingest, NAMES))}
    )
    assert permitted(NAMES, ingest, "ana", auth, {}) == ["orders"]  # another DAG of clicks is not its ingest
    assert permitted(NAMES, ingest, "root", auth, {}) == NAMES  # in declaration order
    assert permitted(NAMES, ingest, "nobody", auth, {}) == []
    assert all(method == "GET" for _, _, method, _ in auth.asked)  # reading, never triggering


def test_each_dag_is_asked_about_with_its_own_team():
    auth = StubAuthManager({"ana": set(map(ingest, NAMES))})
    teams = {ingest("orders"): "sales", ingest("clicks"): "web"}
    assert permitted(NAMES, ingest, "ana", auth, teams) == NAMES
    asked = {team: ids for _, ids, _, team in auth.asked}
    assert asked == {
        "sales": {ingest("orders")},
        "web": {ingest("clicks")},
        None: {ingest("orders_roundtrip")},  # no team: the DAG is not a team's
    }


def test_a_pipeline_the_user_may_not_read_answers_like_one_never_declared():
    declared = load_all(None, PIPELINES_YML)
    shown = {"orders": declared["orders"]}
    assert chosen(shown, None) == [declared["orders"]]
    assert chosen(shown, "orders") == [declared["orders"]]
    with pytest.raises(HTTPException) as hidden:
        chosen(shown, "orders_roundtrip")  # declared, not readable
    with pytest.raises(HTTPException) as unknown:
        chosen(shown, "no_such_pipeline")
    assert hidden.value.status_code == unknown.value.status_code == 404  # not 403: it confirms nothing
    assert hidden.value.detail == unknown.value.detail.replace("no_such_pipeline", "orders_roundtrip")


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"])
def test_fastapi_s_documentation_routes_are_not_served(path):
    """FastAPI adds them outside the app's dependencies: served, they would answer without a login."""
    assert TestClient(app).get(path).status_code == 404


@pytest.mark.parametrize("path", ["/", "/api/pipelines", "/api/publishers", "/metrics"])
def test_every_route_wants_a_login(path):
    assert TestClient(app).get(path).status_code == 401


def test_a_refused_pipeline_hides_no_other_from_the_view(tmp_path, monkeypatch):
    """pipelines.yml with a bad pipeline: the view lists the others (the refused one has no DAG; Airflow's
    import errors name it), as the user's rights allow."""
    import yaml
    from airflow.api_fastapi import app as airflow_app

    from eosflow import settings as settings_mod
    from eosflow_airflow import view
    from eosflow_airflow.hooks.eosflow import EosflowHook

    body = yaml.safe_load(PIPELINES_YML.read_text())
    body["pipelines"]["broken"] = body["pipelines"]["orders"] | {"target_table": "eosflow.ledger"}
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump(body))
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(path))
    monkeypatch.setattr(EosflowHook, "reader_settings", lambda self: settings_mod.load())  # no connection
    auth = StubAuthManager({"ana": {ingest("orders"), ingest("broken")}})
    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: auth)

    _, shown = view._pipelines("ana")
    assert [p.name for p in shown] == ["orders"]
    with pytest.raises(HTTPException) as refused:
        view._pipelines("ana", "broken")
    assert refused.value.status_code == 404
