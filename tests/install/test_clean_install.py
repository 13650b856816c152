"""eosflow as a team's Airflow gets it (issue 45; docs/operations/airflow.md, "Deploying into your own
Airflow"): the product wheel installed beside `apache-airflow` and the Spark provider into a clean
virtualenv, a fresh AIRFLOW_HOME, Airflow connections and one Variable (no EOSFLOW_* variable anywhere),
the scheduler with the LocalExecutor, and an ingest DAG triggered through the REST API that commits,
verifies and shows in the view.

The airflow processes' environment holds only what the operations page tells a user to set, plus Airflow's
own basics (AIRFLOW_HOME, the executor, where the API server listens and its users); PATH and JAVA_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition

from eosflow.settings import Settings
from eosflow_dev.stack import airflow_local
from eosflow_dev.stack.airflow_server import AirflowServer, free_port
from tests.install.wheel import ROOT, build_wheel
from tests.integration.ingest_case import IngestCase

pytestmark = pytest.mark.integration

SPARK_PROVIDER = "apache-airflow-providers-apache-spark"
PYSPARK = "pyspark==4.3.0"  # the jars' version: put back over the provider's pyspark-client
RECORDS = 24  # few: a plan this small is read inline, in the Spark job's driver, without a SparkSession
PASSWORD = "clean-install-admin"


@dataclass
class Installed:
    venv: Path
    seconds: dict[str, float]

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


def _run(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[Installed]:
    """The wheel, `pip install`ed with the Spark provider into a virtualenv of its own, as the operations
    page says: with the project's constraints, then pyspark put back over the provider's pyspark-client."""
    seconds: dict[str, float] = {}
    started = time.monotonic()
    wheel = build_wheel(tmp_path_factory.mktemp("built"), tmp_path_factory.mktemp("source"))
    seconds["wheel"] = time.monotonic() - started
    venv = tmp_path_factory.mktemp("clean") / "venv"
    clean = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}  # pip's cache is HOME's
    started = time.monotonic()
    _run([sys.executable, "-m", "venv", str(venv)], 120, env=clean)
    # --no-compile: what a user's pip does, less the .pyc of every package (Python writes those it imports)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-compile",
        "--disable-pip-version-check",
    ]
    _run([*pip, "-c", str(ROOT / "constraints.txt"), str(wheel), SPARK_PROVIDER], 900, env=clean)
    seconds["install"] = time.monotonic() - started
    # What the provider's pyspark-client did to pyspark, and eosflow refusing to start Spark on it.
    mixed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "from eosflow.spark import versions; versions.check()"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean,
    )
    started = time.monotonic()
    _run([*pip, "--force-reinstall", "--no-deps", PYSPARK], 600, env=clean)
    seconds["pyspark"] = time.monotonic() - started
    assert mixed.returncode != 0 and "MixedPysparkError" in mixed.stderr, mixed.stderr[-2000:]
    assert f"pip install --force-reinstall --no-deps {PYSPARK}" in mixed.stderr
    # Step 1's last line: Spark's jars by the wheel's lock, here from the machine's Maven cache (a
    # repository in Maven's layout, as a team's mirror is), into the environment's own folder.
    started = time.monotonic()
    m2 = Path(clean["HOME"], ".m2", "repository").as_uri()
    _run([str(venv / "bin" / "eosflow"), "jars", "fetch", "--repository", m2], 300, env=clean)
    checked = _run([str(venv / "bin" / "eosflow"), "jars", "check"], 120, env=clean)
    assert str(venv / "share" / "eosflow" / "jars" / "spark") in checked.stdout, checked.stdout
    seconds["jars"] = time.monotonic() - started
    yield Installed(venv, seconds)
    print(
        f"\nclean install, seconds: {json.dumps({k: round(v, 1) for k, v in seconds.items()})}",
        file=sys.stderr,
    )


def _java_home() -> str:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = subprocess.run(["sh", "-c", 'readlink -f "$(command -v java)"'], capture_output=True, text=True)
    return str(Path(java.stdout.strip()).parents[1])


def airflow_environment(installed: Installed, settings: Settings, home: Path, port: int, pipelines: Path):
    """Exactly what the airflow processes see: no EOSFLOW_* (connections only), no PYTHONPATH."""
    connections = airflow_local.connections(settings)  # warehouse, warehouse_readonly, kafka_default
    connections["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[*]"})
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({airflow_local.ADMIN_USER: PASSWORD}))
    passwords.chmod(0o600)
    env = {
        "PATH": os.pathsep.join([str(installed.bin), "/usr/local/bin", "/usr/bin", "/bin"]),
        "JAVA_HOME": _java_home(),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # Step 3 of the operations page: eosflow's DAG bundle beside the DAGs folder.
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(airflow_local.BUNDLES),
        # Airflow's example DAGs are not the point, and parsing them costs the DAG processor a minute here.
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # The REST API's login (SimpleAuthManager), and where the API server listens for it and the tasks.
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{airflow_local.ADMIN_USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        # The run the test triggers is the one that reads the records: no scheduled run of the ingest DAG
        # (every 5 minutes, one made as soon as it is unpaused) takes them first.
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        # Step 2: the connections and the one Variable.
        **connections,
        "AIRFLOW_VAR_EOSFLOW_PIPELINES": str(pipelines),
    }
    assert not [k for k in env if k.startswith("EOSFLOW_")]
    return env


@dataclass
class CleanAirflow:
    server: AirflowServer
    env: dict[str, str]
    home: Path
    work: Path
    pipeline: IngestCase
    installed: Installed


@pytest.fixture(scope="module")
def airflow(installed, running_stack, tmp_path_factory):
    """`airflow db migrate`, then the API server, the scheduler and the DAG processor, each in a process group
    of its own (killed whole), run from a working directory of their own: nothing of the checkout near."""
    root = tmp_path_factory.mktemp("airflow")
    home, work = root / "home", root / "work"
    home.mkdir()
    work.mkdir()
    pipeline = IngestCase(running_stack, root / "pipelines.yml")
    port = free_port()
    env = airflow_environment(installed, running_stack, home, port, pipeline.config_path)
    airflow = str(installed.bin / "airflow")
    started = time.monotonic()
    _run([airflow, "db", "migrate"], 300, env=env, cwd=work)
    installed.seconds["db migrate"] = time.monotonic() - started
    commands = {
        "api-server": [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        "scheduler": [airflow, "scheduler"],
        "dag-processor": [airflow, "dag-processor"],
    }
    procs: dict[str, subprocess.Popen] = {}
    log_path = root / "airflow.log"
    with log_path.open("ab") as log:
        for name, cmd in commands.items():
            procs[name] = subprocess.Popen(
                cmd, env=env, cwd=work, stdout=log, stderr=log, start_new_session=True
            )
    server = AirflowServer(f"http://127.0.0.1:{port}", PASSWORD, procs["api-server"], log_path)
    try:
        deadline = time.monotonic() + 180
        while True:
            dead = {n: p.returncode for n, p in procs.items() if p.poll() is not None}
            assert not dead, f"airflow {dead} exited during start-up:\n{server.log_tail()}"
            try:
                if server.request("GET", "/api/v2/monitor/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"no API server in 180 s:\n{server.log_tail()}"
            time.sleep(1)
        installed.seconds["api server up"] = time.monotonic() - started
        yield CleanAirflow(server, env, home, work, pipeline, installed)
    finally:
        for proc in reversed(list(procs.values())):
            airflow_local.stop_group(proc, timeout=20, log=lambda m: None)


def test_airflow_providers_list_names_eosflow(airflow):
    """The provider by its entry point. The module's set-up comes with the first test: a real `pip install`
    into a clean virtualenv (about 3 minutes of a loaded 2-core machine, pip's cache warm), `airflow db
    migrate` and Airflow's three processes (about 45 s): the point of the test, so not cut."""
    airflow_cli = str(airflow.installed.bin / "airflow")
    done = _run([airflow_cli, "providers", "list"], 120, env=airflow.env, cwd=airflow.work)
    assert "eosflow" in done.stdout.split(), done.stdout[-2000:]


def _ask(server: AirflowServer, method: str, path: str, body: dict | None = None, wait: float = 120):
    """One REST call, asked again while the API server does not answer in time (a loaded machine; its one
    worker busy): (status, JSON body)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return server.request(method, path, body, token=server.token())
        except OSError:
            assert time.monotonic() < deadline, f"{method} {path}: no answer in {wait} s\n{server.log_tail()}"
            time.sleep(2)


def _wait_for_run(server: AirflowServer, dag_id: str, run_id: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        code, run = _ask(server, "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        if code == 200 and run.get("state") in ("success", "failed"):
            return run["state"]
        assert time.monotonic() < deadline, f"{dag_id} {run_id} not done in {timeout} s: {run}"
        time.sleep(3)


def _get(server: AirflowServer, path: str) -> tuple[int, str]:
    """A GET answered with text (the view's routes), as _ask asks."""
    deadline = time.monotonic() + 120
    while True:
        try:
            req = urllib.request.Request(f"{server.base}{path}")
            req.add_header("Authorization", f"Bearer {server.token()}")
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except OSError:
            assert time.monotonic() < deadline, f"GET {path}: no answer in 120 s"
            time.sleep(2)


def _log_end_offsets(settings: Settings, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "clean-install"})
    try:
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), 10) for p in range(partitions)]
        return {p: high for p, (_, high) in enumerate(marks)}
    finally:
        consumer.close()


def test_an_ingest_dag_triggered_over_rest_commits_verifies_and_shows_in_the_view(airflow):
    """One run of the ingest DAG through the scheduler and the LocalExecutor (about 35 s): plan, spark-submit,
    verify, announce."""
    server, pipeline = airflow.server, airflow.pipeline
    manifest = pipeline.produce(RECORDS, seed=4501, partitions=2)
    dag_id = f"eosflow_ingest_{pipeline.name}"
    deadline = time.monotonic() + 180
    while (found := _ask(server, "GET", f"/api/v2/dags/{dag_id}"))[0] != 200:
        assert time.monotonic() < deadline, f"{dag_id} not parsed in 180 s: {found}\n{server.log_tail()}"
        time.sleep(2)
    code, body = _ask(server, "PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    assert code == 200 and body["is_paused"] is False, body
    started = time.monotonic()
    code, run = _ask(server, "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})
    assert code in (200, 201), run
    state = _wait_for_run(server, dag_id, run["dag_run_id"], timeout=300)
    airflow.installed.seconds["dag run"] = time.monotonic() - started
    code, tasks = _ask(server, "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances")
    states = {t["task_id"]: t["state"] for t in tasks.get("task_instances", [])}
    assert state == "success", (states, server.log_tail())
    assert states == dict.fromkeys(("plan", "spark_ingest", "verify", "announce"), "success"), states
    # The Airflow task ran spark-submit on spark_default (local[*]); the job's driver read this small plan in
    # its own process (EOSFLOW_INLINE_MAX_OFFSETS: no SparkSession, so no connector jars are needed).
    run_logs = airflow.home / "logs" / f"dag_id={dag_id}" / f"run_id={run['dag_run_id']}"
    spark_log = (run_logs / "task_id=spark_ingest" / "attempt=1.log").read_text()
    assert "spark-submit --master local[*]" in spark_log and "outcome: COMMITTED" in spark_log
    assert "time: plan" in spark_log and "spark start" not in spark_log, spark_log[-3000:]

    # Committed: every produced record in the target exactly once, the ranges and positions up to the log end.
    produced = sorted(r.event_id for r in manifest.visible())
    assert len(produced) == RECORDS and sorted(pipeline.event_ids()) == produced
    ends = _log_end_offsets(pipeline.settings, pipeline.topic, 2)
    ledger = pipeline.ledger()
    assert {p: max(end for part, _, end, *_ in ledger if part == p) for p in ends} == ends, ledger
    assert sum(row[4] for row in ledger) == RECORDS and {row[3] for row in ledger} == {"data"}
    positions = pipeline.query(
        "select partition, next_offset from eosflow.positions where pipeline = %s", pipeline.name
    )
    assert dict(positions) == ends
    assert pipeline.violations() == []
    # Verified: the verify task kept its verdicts, all passing.
    with psycopg.connect(pipeline.settings.warehouse_dsn) as conn:
        checks = conn.execute(
            "select name, status from eosflow.checks where pipeline = %s "
            "and checked_at = (select max(checked_at) from eosflow.checks where pipeline = %s)",
            (pipeline.name, pipeline.name),
        ).fetchall()
    assert checks and {status for _, status in checks} <= {"pass", "success"}, checks
    # Shown: the view's JSON lists the pipeline, read through warehouse_readonly.
    code, text = _get(server, f"/eosflow/api/pipelines?pipeline={pipeline.name}")
    assert code == 200, text[:500]
    assert [p["pipeline"] for p in json.loads(text)] == [pipeline.name]
    print(f"clean install: seconds {airflow.installed.seconds}", file=sys.stderr)
