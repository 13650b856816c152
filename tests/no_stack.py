"""`make unit`'s pytest plugin (`-p tests.no_stack`): the tests that need no stack, and the proof of it.

Every server's port points at one nothing listens on and the state at .stack/unit, so a client fails at
once instead of finding a stack that happens to run; starting any server of the stack fails the test,
naming the fix (a test that needs the stack is marked `integration`).
"""

from __future__ import annotations

import os
from pathlib import Path

# Loaded by -p before the conftest files, which read the settings when they are imported.
_CLOSED = {
    "EOSFLOW_KAFKA_PORT": 1,
    "EOSFLOW_KAFKA_CONTROLLER_PORT": 2,
    "EOSFLOW_PG_PORT": 3,
    "EOSFLOW_AIRFLOW_PORT": 4,
    "EOSFLOW_KAFKA_PROXIED_PORT": 5,
    "EOSFLOW_KAFKA_PROXY_PORT": 6,
    "EOSFLOW_TOXIPROXY_PORT": 7,
    "EOSFLOW_KAFKA_SASL_PORT": 8,
    "EOSFLOW_REGISTRY_PORT": 9,
    "EOSFLOW_ICEBERG_REST_PORT": 10,
    "EOSFLOW_CONNECT_PORT": 11,
    "EOSFLOW_S3_PORT": 12,
}
os.environ.update({name: str(port) for name, port in _CLOSED.items()})
os.environ["EOSFLOW_KAFKA_BOOTSTRAP_SERVERS"] = ""
os.environ["EOSFLOW_STATE_DIR"] = str(Path(__file__).resolve().parents[1] / ".stack" / "unit")


class StackNeededError(RuntimeError):
    """A test of `make unit` tried to start a server of the stack."""


def _refuse(service: str, host: str, ports: dict[str, int]) -> None:
    raise StackNeededError(
        f"this test starts {service}: it needs the stack, so `make unit` cannot run it. Mark its module "
        "`pytestmark = pytest.mark.integration` (make test runs it against the real stack)"
    )


def pytest_configure(config) -> None:
    # Every server of the stack (Kafka, Postgres, the registry, the JVM servers, the Spark cluster) checks its
    # ports just before it starts: the one place to refuse, after the checks a unit test may exercise.
    from eosflow_dev.stack import process

    process.require_free_ports = _refuse
