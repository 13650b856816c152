"""An Airflow task cleared and re-run after it succeeded: the operator's most common "fix".

A real `airflow standalone` runs the pipeline's ingest DAG against the lab stack; once the run
succeeded, its Spark task is cleared through the REST API (as the UI's Clear button does) and
runs again. The fault counts once Airflow reports a second try of the task.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from eosflow_dev.lab.outcome import Trial
from eosflow_dev.lab.world import Lab, LabPipeline
from eosflow_dev.stack import airflow_server

TASK = "spark_ingest"


def cleared_and_rerun(lab: Lab, cells: Sequence[tuple[str, int]]) -> list[Trial]:
    # Every pipeline is declared before Airflow starts, so its DAG is parsed at start-up.
    prepared = []
    for mode, trial in cells:
        p = lab.pipeline("airflow_clear", mode, trial)
        prepared.append((p, trial, lab.produce(p, seed=lab.seed + trial)))
    lab.log("starting airflow standalone for the lab (about a minute)")
    server = airflow_server.start(lab.settings, lab.home / "airflow", lab.pipelines_file)
    try:
        return [_one(lab, server, p, trial, manifest) for p, trial, manifest in prepared]
    finally:
        airflow_server.stop(server)


def _one(lab: Lab, server: airflow_server.AirflowServer, p: LabPipeline, trial: int, manifest) -> Trial:
    dag_id = f"eosflow_ingest_{p.name}"
    # The DAG is scheduled and unpaused: the scheduler starts its first run as soon as it sees it,
    # and that run ingests everything produced. It is the run whose task gets cleared.
    run_id = _first_run(server, dag_id)
    token = server.token()
    first = server.wait_for_run(dag_id, run_id)
    code, cleared = server.request(
        "POST",
        f"/api/v2/dags/{dag_id}/clearTaskInstances",
        {"dag_run_id": run_id, "task_ids": [TASK], "dry_run": False, "only_failed": False},
        token=token,
    )
    if code != 200:
        raise airflow_server.AirflowServerError(f"clearing {TASK} of {run_id} failed: {code} {cleared}")
    tries = _wait_for_try(server, dag_id, run_id, 2)
    second = server.wait_for_run(dag_id, run_id)
    detail = (
        f"DAG run {run_id}: {first}; {TASK} cleared and re-run (try {tries['try_number']}, "
        f"{tries['state']}); run {second}"
    )
    lab.log(f"  airflow clear [{p.mode}] trial {trial}: {detail}")
    return Trial.of(
        "airflow task cleared and re-run",
        p.mode,
        "transactional",
        trial,
        lab.measure(p, manifest),
        invariants=lab.invariants(p),
        faults=int(first == "success" and tries["try_number"] >= 2 and tries["state"] == "success"),
        fault_detail=detail,
    )


def _first_run(server, dag_id: str, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code, body = server.request(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=id&limit=1", token=server.token()
        )
        if code == 200 and body.get("dag_runs"):
            return body["dag_runs"][0]["dag_run_id"]
        time.sleep(3)
    raise airflow_server.AirflowServerError(f"the scheduler started no run of {dag_id} in {timeout_s}s")


def _wait_for_try(server, dag_id: str, run_id: str, number: int, timeout_s: float = 600) -> dict:
    """The task instance once its try `number` has finished."""
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{TASK}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code, ti = server.request("GET", path, token=server.token())
        if code == 200 and ti.get("try_number", 0) >= number and ti.get("state") in ("success", "failed"):
            return ti
        time.sleep(3)
    raise airflow_server.AirflowServerError(f"{TASK} of {run_id} did not finish try {number} in {timeout_s}s")
