"""Shared fixtures. Integration tests use the real local stack (`eosflow stack up`)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid

import pytest

from eosflow_dev import stack
from eosflow_dev.stack import airflow_local
from eosflow_dev.stack import settings as settings_mod
from tests.stack_servers import connect_server, iceberg_rest, s3_server, spark_connect  # noqa: F401  (fixtures)

# Airflow reads its configuration when first imported: point it at a test home, the project's
# dags/ and plugins/, and connections to the stack, before any test imports it. Each pytest-xdist worker
# gets a home (and a metadata database) of its own.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_TEST_AIRFLOW_HOME = settings_mod.load().state_dir / ("airflow-tests" + (f"-{_WORKER}" if _WORKER else ""))
os.environ.update(airflow_local.airflow_env(settings_mod.load()))
os.environ["AIRFLOW_HOME"] = str(_TEST_AIRFLOW_HOME)
logging.getLogger("py4j").setLevel(logging.WARNING)  # its shutdown chatter hits closed streams
os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(_TEST_AIRFLOW_HOME / "passwords.json")
# Airflow's OpenLineage provider in the in-process DAG runs (dag.test), configured before Airflow is first
# imported (its plugin registers its listener then, or never): a file per worker, and only for the DAGs
# whose id starts with LINEAGE_DAGS (its emission policy), so every other DAG run sends nothing. Emitted
# in a thread, not a forked process (the provider's execute_in_thread): a fork of this many-threaded
# process cannot reach Airflow's connections, which the Spark task's lineage reads.
LINEAGE_DAGS = "eosflow_ingest_lineage_"
_AIRFLOW_LINEAGE_FILE = _TEST_AIRFLOW_HOME / "openlineage.jsonl"
os.environ["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps(
    {"type": "file", "log_file_path": str(_AIRFLOW_LINEAGE_FILE), "append": True}
)
os.environ["AIRFLOW__OPENLINEAGE__EMISSION_POLICY"] = json.dumps(
    [
        {"scope": {}, "controls": {"emit": False}},
        {"match_mode": "regex", "scope": {"dag_id": f"{LINEAGE_DAGS}.*"}, "controls": {"emit": True}},
    ]
)
os.environ["AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD"] = "True"


# Under pytest-xdist (`make test` runs three workers) a file's tests stay together on one worker, so a
# module's fixture (the lab's own stack, an Airflow standalone) is made once; files that share a session
# fixture share a group, so it is made once too. (xdist's own loadgroup cannot do this under pytest 9.2:
# it renames node ids, which pytest no longer reads.)
_SHARED_GROUPS = {
    "tests/airflow/test_browser.py": "airflow_server",
    "tests/airflow/test_browser_view.py": "airflow_server",
    "tests/airflow/test_eosflow_view.py": "airflow_server",
    "tests/airflow/test_kafka_wake.py": "airflow_server",
    "tests/airflow/test_standalone_rest.py": "airflow_server",
    # The stack's one Spark Connect server: tests that kill it must not run beside tests that use it.
    "tests/integration/test_spark_connect.py": "spark_connect_server",
    "tests/airflow/test_spark_connect_task.py": "spark_connect_server",
    "tests/bench/test_bench_smoke.py": "spark_connect_server",
    "tests/random/test_random_schedule.py": "spark_connect_server",  # the batch schedule kills it
}
# The longest groups start first, so none is left to run alone at the end.
_FIRST = ("tests/lab/", "tests/install/", "tests/random/", "tests/airflow/")


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByFileAndGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return _SHARED_GROUPS.get(path, path)

    config.option.loadscopereorder = False  # keep the order below: the longest first
    return ByFileAndGroup(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    if not _WORKER and not config.getoption("numprocesses", None):
        return  # one process: the collection order, as before
    root = config.rootpath

    def rank(item) -> int:
        path = item.path.relative_to(root).as_posix()
        return next((i for i, prefix in enumerate(_FIRST) if path.startswith(prefix)), len(_FIRST))

    items.sort(key=rank)  # stable: within a rank, the collection order stays


# A test that needs more than a minute (its set-up included) says why in its docstring; the summary
# names any that does not, so the suite's budget stays a decision.
_SLOW_S = 60.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    item.eosflow_seconds = getattr(item, "eosflow_seconds", 0.0) + report.duration
    doc = getattr(getattr(item, "function", None), "__doc__", None)
    if report.when == "teardown" and item.eosflow_seconds > _SLOW_S and not (doc or "").strip():
        report.user_properties.append(("slow_without_a_why", round(item.eosflow_seconds)))
    return report


def pytest_terminal_summary(terminalreporter) -> None:
    slow = [
        (r.nodeid, dict(r.user_properties)["slow_without_a_why"])
        for reports in terminalreporter.stats.values()
        for r in reports
        if "slow_without_a_why" in dict(getattr(r, "user_properties", ()))
    ]
    if slow:
        terminalreporter.section(f"tests over {_SLOW_S:.0f} s whose docstring does not say why")
        for nodeid, seconds in slow:
            terminalreporter.line(f"{seconds:>5} s  {nodeid}")


@pytest.fixture(scope="session")
def settings() -> settings_mod.StackSettings:
    return settings_mod.load()


@pytest.fixture(scope="session")
def running_stack(settings):
    """The project's stack, started if needed (idempotent) and left running for other tests."""
    stack.up(settings, log=lambda msg: None)
    return settings


@pytest.fixture(scope="module")
def spark(settings):
    """The local Spark session, made exactly as the ingestion job makes it.

    Asked for per module, not once per run: getOrCreate hands back the session already running (an
    in-process job's, too), and makes a new one if a test stopped it, so no module inherits a dead
    session. The JVM ends with pytest.
    """
    from eosflow.spark.session import get_spark

    session = get_spark(settings, "eosflow-tests")
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="session")
def airflow_lineage_file():
    """Where Airflow's OpenLineage provider writes the events of this process's DAG runs whose id starts
    with LINEAGE_DAGS, one JSON per line."""
    return _AIRFLOW_LINEAGE_FILE


@pytest.fixture
def topic_name(request) -> str:
    """A topic name of its own for each test, so tests never read each other's records."""
    return f"test.{request.node.name[:40].replace('[', '.').replace(']', '')}.{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def airflow_db():
    """Airflow's metadata database for in-process DAG runs (dag.test)."""
    _TEST_AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    done = subprocess.run(
        [airflow, "db", "migrate"], env=os.environ, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return _TEST_AIRFLOW_HOME


@pytest.fixture(autouse=True)
def _eosflow_environment_unchanged():
    """A test that changes an EOSFLOW_* setting in this process without restoring it (monkeypatch restores
    its own, and is undone before this runs) changes every later test on the same worker: the random
    Iceberg schedule's compact once left EOSFLOW_ICEBERG_ORPHAN_HOURS at a second, and a later test's
    compact removed a fenced run's files it expected to keep."""
    before = {k: v for k, v in os.environ.items() if k.startswith("EOSFLOW_")}
    yield
    after = {k: v for k, v in os.environ.items() if k.startswith("EOSFLOW_")}
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"this test left EOSFLOW_* settings changed for the tests after it: {changed}"
