"""`eosflow stack` as a user runs it: a private second stack on its own ports and state folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from eosflow_dev.stack import optional as stack_optional
from eosflow_dev.stack.process import port_is_free

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def private_env(tmp_path):
    ports = {
        "EOSFLOW_KAFKA_PORT": _free_port(),
        "EOSFLOW_KAFKA_CONTROLLER_PORT": _free_port(),
        "EOSFLOW_KAFKA_SASL_PORT": _free_port(),  # the SASL listener binds too: never the dev stack's
        "EOSFLOW_PG_PORT": _free_port(),
        "EOSFLOW_REGISTRY_PORT": _free_port(),
    }
    env = dict(os.environ, EOSFLOW_STATE_DIR=str(tmp_path / "state"), **{k: str(v) for k, v in ports.items()})
    env.pop("EOSFLOW_STACK_WITH", None)  # a bare `up`: no optional server, whatever the caller asked
    yield env, ports
    # reset = down + wipe: the private cluster may live in /var/tmp (see PostgresService._home)
    subprocess.run([sys.executable, "-m", "eosflow.cli", "stack", "reset"], env=env, capture_output=True)


def _stack(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "stack", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _pids(status_out: str) -> dict[str, str]:
    return {
        line.split()[0]: line.split("pid")[1].split()[0] for line in status_out.splitlines() if "pid" in line
    }


def test_up_is_idempotent_status_reports_health_and_down_stops_it(private_env):
    """Slow because it builds a private stack from nothing (Kafka's storage formatted and its JVM started,
    a Postgres cluster made by initdb, the registry), brings it up a second time, and stops it."""
    env, ports = private_env
    first = _stack(env, "up")
    assert first.returncode == 0, first.stderr
    assert "formatting kafka storage" in first.stderr and "creating the warehouse cluster" in first.stderr
    pids = _pids(first.stdout)
    # The optional servers are listed, not started: a bare `up` never starts them.
    optional = stack_optional.NAMES  # listed, not started by a bare up
    assert [pids.pop(name) for name in optional] == ["-"] * len(optional)
    assert set(pids) == {"kafka", "postgres", "registry"} and "-" not in pids.values()

    second = _stack(env, "up")
    assert second.returncode == 0, second.stderr
    assert "starting" not in second.stderr  # nothing started twice
    assert {k: v for k, v in _pids(second.stdout).items() if v != "-"} == pids

    status = _stack(env, "status")
    assert status.returncode == 0
    assert status.stdout.count("healthy") == 3

    down = _stack(env, "down")
    assert down.returncode == 0
    assert all(port_is_free("127.0.0.1", p) for p in ports.values())
    after = _stack(env, "status")
    assert after.returncode == 3  # not healthy: a script can tell
    assert after.stdout.count("stopped") == 3


def test_a_busy_port_is_named_with_what_to_do_and_nothing_starts(private_env):
    env, ports = private_env
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ports["EOSFLOW_PG_PORT"]))
        squatter.listen()
        out = _stack(env, "up")
    assert out.returncode == 2
    assert f"port {ports['EOSFLOW_PG_PORT']}" in out.stderr
    assert "already in use" in out.stderr and "EOSFLOW_PG_PORT" in out.stderr
    assert port_is_free("127.0.0.1", ports["EOSFLOW_KAFKA_PORT"])  # kafka was not left half-started


def test_a_missing_prerequisite_says_what_and_how_to_get_it(private_env, tmp_path):
    env, _ = private_env
    env = dict(env, EOSFLOW_PG_BIN=str(tmp_path / "nowhere"))
    out = _stack(env, "up")
    assert out.returncode == 2
    assert "PostgreSQL 15 server binaries not found" in out.stderr
    assert "apt-get install postgresql-15" in out.stderr


def test_the_pipeline_role_is_not_a_superuser(running_stack):
    import psycopg

    with psycopg.connect(running_stack.warehouse_dsn) as conn:
        (superuser,) = conn.execute("select rolsuper from pg_roles where rolname = current_user").fetchone()
        (owner,) = conn.execute(
            "select pg_get_userbyid(datdba) from pg_database where datname = current_database()"
        ).fetchone()
    assert superuser is False
    assert owner == running_stack.pg_user


def test_up_from_many_processes_at_once_on_a_running_stack_provisions_without_a_race(running_stack):
    """Each pytest-xdist worker calls stack.up when its session starts; Postgres' provisioning (ALTER ROLE
    ... PASSWORD) from several at once failed with `tuple concurrently updated` on three workers, and the
    session fixture's error then failed every test of that worker."""
    from concurrent.futures import ThreadPoolExecutor

    from eosflow_dev.stack.postgres import PostgresService

    def start(_: int) -> None:
        PostgresService(running_stack).start(log=lambda msg: None)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(start, range(24)))  # raises the first error any start met
