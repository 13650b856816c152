"""The eosflow view and metrics, a FastAPI app mounted in Airflow's API server at /eosflow.

Airflow does not authenticate plugin apps: every route here depends on Airflow's own `get_user` (a
JWT as a bearer token, or the UI's session cookie), so a request without a login gets 401. Everything is
read-only and read through the read-only role (EosflowHook.reader_settings).

- GET /eosflow/                       the page (?pipeline=P&partition=N filters the ledger's ranges)
- GET /eosflow/api/pipelines          the same state as JSON
- GET /eosflow/api/publishers         each publisher's position, waiting rows and what holds them
- GET /eosflow/metrics                Prometheus text format (eosflow.observe.metrics)
"""

from __future__ import annotations

import asyncio
import dataclasses

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse, Response

app = FastAPI(
    title="eosflow",
    description="Pipelines, lag, ledger and invariants (read-only)",
    dependencies=[Depends(get_user)],
)


def _states(pipeline: str | None = None, partition: int | None = None):
    from eosflow.observe.state import snapshot
    from eosflow.pipelines import load_all
    from eosflow_airflow.hooks import EosflowHook

    settings = EosflowHook().reader_settings()
    declared = list(load_all(settings).values())
    chosen = [p for p in declared if pipeline in (None, p.name)]
    return snapshot(settings, chosen, partition if pipeline else None)


@app.get("/", response_class=HTMLResponse)
async def page(pipeline: str | None = None, partition: int | None = Query(None, ge=0)) -> str:
    from eosflow_airflow.view_page import page as render

    # Sync database and Kafka calls: off the event loop, which serves the whole API server.
    states, publishers = await asyncio.gather(
        asyncio.to_thread(_states_for_page, pipeline, partition), asyncio.to_thread(_publishers)
    )
    return render(states, partition, publishers)


def _publishers():
    from eosflow.observe.state import publisher_snapshot
    from eosflow.publishers import load_publishers
    from eosflow_airflow.hooks import EosflowHook

    settings = EosflowHook().reader_settings()
    return publisher_snapshot(settings, list(load_publishers(settings).values()))


def _states_for_page(pipeline: str | None, partition: int | None):
    from eosflow.observe.state import snapshot
    from eosflow.pipelines import load_all
    from eosflow_airflow.hooks import EosflowHook

    settings = EosflowHook().reader_settings()
    declared = list(load_all(settings).values())
    # Every pipeline is shown; the partition filter applies to the one pipeline named.
    return [snapshot(settings, [p], partition if p.name == pipeline else None)[0] for p in declared]


@app.get("/api/pipelines")
async def pipelines(pipeline: str | None = None, partition: int | None = Query(None, ge=0)) -> list[dict]:
    states = await asyncio.to_thread(_states, pipeline, partition)
    return [_json(s) for s in states]


@app.get("/api/publishers")
async def publishers() -> list[dict]:
    return [
        {
            "publisher": s.publisher.name,
            "table": s.publisher.table,
            "topic": s.publisher.topic,
            "error": s.error,
            **({} if s.health is None else dataclasses.asdict(s.health) | {"judged": s.health.judged}),
        }
        for s in await asyncio.to_thread(_publishers)
    ]


@app.get("/metrics")
async def metrics() -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    from eosflow.observe.metrics import exposition

    body = await asyncio.to_thread(exposition, _states)
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
