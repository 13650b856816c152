import dataclasses
import json
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
import yaml
from confluent_kafka import TopicPartition

from eosflow.kafka_admin import admin
from eosflow_dev.stack import airflow_local
from eosflow_dev.stack import airflow_server as standalone
from tests.integration.conftest import case  # noqa: F401  (a pipeline of its own per test)
from tests.integration.ingest_case import IngestCase

OUTSIDER = "outsider"


def token_of(server, settings, username: str) -> str:
    """A login of another user than admin: SimpleAuthManager wrote their password beside admin's."""
    home = dataclasses.replace(settings, state_dir=server.log_path.parent)
    password = json.loads(airflow_local.passwords_file(home).read_text())[username]
    code, body = server.request("POST", "/auth/token", {"username": username, "password": password})
    assert code in (200, 201), body
    return body["access_token"]


def dag_runs(server, dag_id: str) -> list[dict]:
    code, body = server.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100", token=server.token())
    assert code == 200, body
    return body["dag_runs"]


def settled(server, dag_id: str, timeout: float = 180) -> None:
    """The DAG is parsed and the scheduler is done with it: no run active, the next interval a day away."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, dag = server.request("GET", f"/api/v2/dags/{dag_id}", token=server.token())
        if code == 200 and dag.get("next_dagrun_run_after"):
            next_run = datetime.fromisoformat(dag["next_dagrun_run_after"].replace("Z", "+00:00"))
            idle = all(r["state"] in ("success", "failed") for r in dag_runs(server, dag_id))
            if idle and next_run > datetime.now(UTC) + timedelta(hours=1):
                return
        time.sleep(3)
    raise AssertionError(f"{dag_id} did not settle in {timeout}s:\n{server.log_tail()}")


@pytest.fixture(scope="package")
def shared_airflow(running_stack, tmp_path_factory):
    """A running `airflow standalone` serving two pipelines: one with committed data (so replays can run)
    and one that wakes on records (tests/airflow/test_kafka_wake.py: a standalone of its own cost that test
    about 100 s, its start and its first scheduled run). Each keeps a pipelines file of its own, for what
    a test runs outside Airflow; the server reads both from a third.

    The ingest interval is a day: every run is one a test triggers or wakes, never one of the schedule's
    (each ingest DAG runs once at start, as a DAG unpaused at creation does). Besides `admin`, a user
    `outsider` who may log in and read no DAG (no role in Airflow's SimpleAuthManager): the eosflow view
    must show them no pipeline.

    Package-scoped: it stops when its worker leaves tests/airflow/ (the tests that use it run one after
    the other: conftest's "airflow_server" group), not at the session's end: left idle, its DAG processor
    re-parsed eosflow's eight DAG files every 30 s for the rest of the suite (312 parses in one run)."""
    root = tmp_path_factory.mktemp("airflow-server")
    pipeline = IngestCase(running_stack, root / "pipelines.yml")
    woken = IngestCase(running_stack, root / "woken.yml", spec={"wake_on_records": True})
    woken.create_topic(2)  # before the start: the triggerer's watcher subscribes to it
    pipeline.produce(600, seed=501, partitions=2)
    first = pipeline.ingest_process("--run-id", "seed-run")
    assert first.returncode == 0, first.stderr[-2000:]
    served = root / "served.yml"
    served.write_text(yaml.safe_dump({"pipelines": {p.name: p.spec for p in (pipeline, woken)}}))
    lineage = root / "openlineage.jsonl"
    env = {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{airflow_local.ADMIN_USER}:admin,{OUTSIDER}:",
        "EOSFLOW_INGEST_INTERVAL_MINUTES": str(24 * 60),
        # Airflow's OpenLineage provider, configured as its users configure it, into a file a test reads.
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(lineage), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "team-airflow",
        # Every DAG, as the provider emits by default (the tests' own processes emit for a few: conftest).
        "AIRFLOW__OPENLINEAGE__EMISSION_POLICY": "[]",
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "False",
        # Its DAG files are parsed once: the pipelines they are made from never change while it serves
        # (re-parsed every 30 s by default, eight files at a time, for nothing).
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
    }
    server = standalone.start(running_stack, root / "state", served, env=env)
    try:
        # Each ingest DAG's first run (made at once, unpaused at creation) done before any test: it would
        # compete with the first test for the CPU, and ingest records a test produced to see lag.
        for each in (pipeline, woken):
            settled(server, f"eosflow_ingest_{each.name}", timeout=600)
        yield server, pipeline, woken, lineage
    finally:
        standalone.stop(server)  # the wake group stays, like the topics: the broker expires it (retention)


@pytest.fixture(scope="package")
def airflow_server(shared_airflow):
    """The shared standalone and its pipeline with committed data."""
    server, pipeline, _, _ = shared_airflow
    return server, pipeline


@pytest.fixture(scope="package")
def woken(shared_airflow):
    """The shared standalone and its pipeline that wakes on records (its topic made, nothing produced)."""
    server, _, woken, _ = shared_airflow
    return server, woken


@pytest.fixture(scope="package")
def openlineage_file(shared_airflow) -> Path:
    """Where the shared standalone's OpenLineage provider writes its events (one JSON per line)."""
    return shared_airflow[3]


class TaskOutcomes:
    """How each try of a DAG's tasks ended, as the tasks' own failure and retry callbacks saw it."""

    def __init__(self) -> None:
        self.failed: dict[str, list[BaseException | None]] = defaultdict(list)
        self.retried: dict[str, list[BaseException | None]] = defaultdict(list)

    def watch(self, dag):
        for task in dag.tasks:
            task.on_failure_callback = [partial(self._record, self.failed, task.task_id)]
            task.on_retry_callback = [partial(self._record, self.retried, task.task_id)]
            # A retry that should not happen comes at once (dag.test() waits out the delay).
            task.retry_delay = timedelta(seconds=1)
        return dag

    @staticmethod
    def _record(into, task_id: str, context) -> None:
        into[task_id].append(context.get("exception"))


@pytest.fixture
def task_outcomes() -> TaskOutcomes:
    return TaskOutcomes()


@pytest.fixture
def delete_records():
    """What retention does: everything of a partition below `before` is gone from the log."""

    def delete(pipeline: IngestCase, partition: int, before: int) -> None:
        client = admin(pipeline.settings.bootstrap_servers)  # kept alive until the futures resolve
        futures = client.delete_records([TopicPartition(pipeline.topic, partition, before)])
        for future in futures.values():
            future.result(timeout=30)

    return delete


@pytest.fixture(autouse=True)
def _dag_test_passes_without_a_pause(monkeypatch):
    """dag.test() sleeps a second after each pass over the run that found no task to run, and a failed or
    skipped task reaches the tasks below it one level per pass: a run whose first task failed (a refused
    backfill, a dry run, a failed plan) slept 2 s for nothing (about 20 s of the suite). Without an
    executor nothing changes a state between passes but the next pass, so that sleep is cut to 10 ms;
    a task waiting out its retry delay still waits a second per pass, as in Airflow."""
    from airflow.sdk.definitions.dag import DAG

    real_sleep, passes = time.sleep, DAG.test.__code__

    def sleep(seconds: float) -> None:
        caller = sys._getframe(1)
        if caller.f_code is passes:
            waiting = caller.f_locals.get("ids_unrunnable", ())
            if not caller.f_locals.get("awaiting_input_tis") and all(
                str(ti.state) != "up_for_retry" for ti in waiting
            ):
                seconds = min(seconds, 0.01)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
