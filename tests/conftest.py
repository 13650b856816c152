"""Shared fixtures. Integration tests use the real local stack (`eosflow stack up`)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid

import pytest

from eosflow import airflow_local, stack
from eosflow import settings as settings_mod

# Airflow reads its configuration when first imported: point it at a test home, the project's
# dags/ and plugins/, and connections to the stack, before any test imports it.
_TEST_AIRFLOW_HOME = settings_mod.load().state_dir / "airflow-tests"
os.environ.update(airflow_local.airflow_env(settings_mod.load()))
os.environ["AIRFLOW_HOME"] = str(_TEST_AIRFLOW_HOME)
logging.getLogger("py4j").setLevel(logging.WARNING)  # its shutdown chatter hits closed streams
os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(_TEST_AIRFLOW_HOME / "passwords.json")


@pytest.fixture(scope="session")
def settings() -> settings_mod.Settings:
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
    from eosflow.ingest.spark_session import get_spark

    session = get_spark(settings, "eosflow-tests")
    session.sparkContext.setLogLevel("ERROR")
    return session


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
