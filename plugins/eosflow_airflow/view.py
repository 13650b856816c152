"""The eosflow view and metrics, a FastAPI app mounted in Airflow's API server at /eosflow.

Airflow does not authenticate plugin apps: every route here depends on Airflow's own `get_user` (a
JWT as a bearer token, or the UI's session cookie), so a request without a login gets 401. What a user
sees is what Airflow's auth manager lets them read: a pipeline if they may read its ingest DAG, a
publisher if they may read its publish DAG; one they may not read answers 404, as one never declared
does. FastAPI's own documentation routes (/docs, /redoc, /openapi.json) are off: FastAPI serves them
outside the app's dependencies, so they would answer without a login (the routes are listed below and in
docs/operations/airflow.md). Everything is read-only and read through the read-only role
(EosflowHook.reader_settings).

- GET /eosflow/                       the page (?pipeline=P&partition=N filters the ledger's ranges)
- GET /eosflow/api/pipelines          the same state as JSON
- GET /eosflow/api/publishers         each publisher's position, waiting rows and what holds them
- GET /eosflow/metrics                Prometheus text format (eosflow.observe.metrics)
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from airflow.api_fastapi.core_api.security import GetUserDep, get_user
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, Response

app = FastAPI(
    title="eosflow",
    description="Pipelines, lag, ledger and invariants (read-only)",
    dependencies=[Depends(get_user)],
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)

T = TypeVar("T")


def permitted(
    names: Iterable[str],
    dag_id: Callable[[str], str],
    user: object,
    auth_manager: object,
    teams: Mapping[str, str | None],
) -> list[str]:
    """The names (in their order) whose DAG, `dag_id(name)`, the auth manager lets the user read.

    Asked per team, as Airflow's own `get_authorized_dag_ids` asks: in multi-team mode a DAG's team is
    part of the question (`teams`: DAG id to team; a DAG of no team is absent)."""
    names = list(names)
    by_team: dict[str | None, set[str]] = defaultdict(set)
    for name in names:
        by_team[teams.get(dag_id(name))].add(dag_id(name))
    allowed: set[str] = set()
    for team, dag_ids in by_team.items():
        allowed |= auth_manager.filter_authorized_dag_ids(  # type: ignore[attr-defined]
            dag_ids=dag_ids, user=user, method="GET", team_name=team
        )
    return [n for n in names if dag_id(n) in allowed]


def chosen(shown: Mapping[str, T], name: str | None) -> list[T]:
    """What the user may read, or only the one named; a name not among them is a 404 whether it is not
    declared or hidden from this user, so the answer does not tell which."""
    if name is None:
        return list(shown.values())
    if name not in shown:
        raise HTTPException(
            404, f"no pipeline {name!r} to show: it is not declared, or you may not read its DAG"
        )
    return [shown[name]]


def _readable(declared: Mapping[str, T], dag_id: Callable[[str], str], user) -> dict[str, T]:
    """`declared`, less what Airflow's auth manager does not let this user read."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.configuration import conf

    teams: Mapping[str, str | None] = {}
    if conf.getboolean("core", "multi_team", fallback=False):  # else no DAG has a team: no query
        from airflow.models.dag import DagModel

        teams = DagModel.get_dag_id_to_team_name_mapping([dag_id(n) for n in declared])
    return {n: declared[n] for n in permitted(declared, dag_id, user, get_auth_manager(), teams)}


def _pipelines(user, pipeline: str | None = None):
    """The reader's settings and the pipelines this user may read (only `pipeline`, if named)."""
    from eosflow.pipelines import load_databases, load_each, members
    from eosflow_airflow.hooks.eosflow import EosflowHook
    from eosflow_airflow.operators.tasks import ingest_dag_id

    settings = EosflowHook().reader_settings()
    declared, _ = load_each(settings)  # a refused pipeline has no DAG: Airflow's import errors name it
    dag_of = {name: ingest_dag_id(name) for name in declared}
    # A database entry's members, each shown as a pipeline to whoever may read the entry's one DAG.
    for entry in load_databases(settings)[0].values():
        for name, member in members(settings, entry).items():
            declared.setdefault(name, member)
            dag_of.setdefault(name, ingest_dag_id(entry.name))
    return settings, chosen(_readable(declared, dag_of.__getitem__, user), pipeline)


def _states(user, pipeline: str | None = None, partition: int | None = None):
    from eosflow.observe.state import snapshot

    settings, shown = _pipelines(user, pipeline)
    return snapshot(settings, shown, partition if pipeline else None)


@app.get("/", response_class=HTMLResponse)
async def page(
    user: GetUserDep, pipeline: str | None = None, partition: int | None = Query(None, ge=0)
) -> str:
    from eosflow_airflow.view_page import page as render

    # Sync database and Kafka calls: off the event loop, which serves the whole API server.
    states, publishers = await asyncio.gather(
        asyncio.to_thread(_states_for_page, user, pipeline, partition), asyncio.to_thread(_publishers, user)
    )
    return render(states, partition, publishers)


def _publishers(user):
    from eosflow.observe.state import publisher_snapshot
    from eosflow.publish.declaration import load_publishers
    from eosflow_airflow.hooks.eosflow import EosflowHook
    from eosflow_airflow.operators.tasks import publish_dag_id

    settings = EosflowHook().reader_settings()
    shown = _readable(load_publishers(settings), publish_dag_id, user)
    return publisher_snapshot(settings, list(shown.values()))


def _states_for_page(user, pipeline: str | None, partition: int | None):
    from eosflow.observe.state import snapshot

    settings, shown = _pipelines(user)
    chosen({p.name: p for p in shown}, pipeline)  # a pipeline named must be one the user may read
    # Every pipeline the user may read is shown; the partition filter applies to the one pipeline named.
    return [snapshot(settings, [p], partition if p.name == pipeline else None)[0] for p in shown]


@app.get("/api/pipelines")
async def pipelines(
    user: GetUserDep, pipeline: str | None = None, partition: int | None = Query(None, ge=0)
) -> list[dict]:
    states = await asyncio.to_thread(_states, user, pipeline, partition)
    return [_json(s) for s in states]


@app.get("/api/publishers")
async def publishers(user: GetUserDep) -> list[dict]:
    return [
        {
            "publisher": s.publisher.name,
            "table": s.publisher.table,
            "topic": s.publisher.topic,
            "error": s.error,
            **({} if s.health is None else dataclasses.asdict(s.health) | {"judged": s.health.judged}),
        }
        for s in await asyncio.to_thread(_publishers, user)
    ]


@app.get("/metrics")
async def metrics(user: GetUserDep) -> Response:
    """The pipelines the scraper's login may read (a token of a user with read rights on them)."""
    from prometheus_client import CONTENT_TYPE_LATEST

    from eosflow.observe.metrics import exposition

    body = await asyncio.to_thread(exposition, lambda: _states(user))
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def _json(s) -> dict:
    return {
        "pipeline": s.pipeline.name,
        "lag": s.lag,
        "last_commit": s.last_commit,
        "checks_ok": s.checks_ok,
        "partitions": [dataclasses.asdict(p) | {"lag": p.lag} for p in s.partitions],
        "lag_seconds": {f"{t}[{p}]": v for (t, p), v in s.lag_seconds.items()},
        "ranges": s.ranges,
        "checks": s.checks,
        "plans": s.plans,
        "hourly": s.hourly,
        "totals": s.totals,
        "kafka_error": s.kafka_error,
    }
