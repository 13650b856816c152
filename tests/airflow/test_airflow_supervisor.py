"""`eosflow airflow` under a supervisor: a SIGTERM to eosflow stops the whole Airflow process group.

systemd, a container runtime or `kill` stop a service with SIGTERM to the process they started, not
Ctrl-C; `airflow standalone` runs in a session of its own, so nothing else would reach it. It needs no
Kafka or Postgres: a state folder and a free port of its own, so it never meets another Airflow.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace

import psutil
import pytest

from eosflow_dev.stack.airflow_server import free_port


def _group(pgid: int) -> list[psutil.Process]:
    """The live (not zombie) processes of a process group."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return members


def _live(procs: list[psutil.Process]) -> list[str]:
    """Those still running (not zombies, not a new process under a reused pid), described."""
    live = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                live.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            pass  # ended while we looked
    return live


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture
def eosflow_airflow(tmp_path):
    """`python -m eosflow.cli airflow` with its own state folder and port; killed if a test leaves it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}  # conftest's test home
    env |= {
        "EOSFLOW_STATE_DIR": str(tmp_path / "state"),
        "EOSFLOW_AIRFLOW_PORT": str(port),
        "AIRFLOW__CORE__PARALLELISM": "2",
    }
    log = (tmp_path / "eosflow-airflow.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "eosflow.cli", "airflow"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    run = SimpleNamespace(
        proc=proc, port=port, log=tmp_path / "eosflow-airflow.log", pgid=None, tree=[]
    )  # the test fills in pgid and tree, for the clean-up below
    yield run
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for leftover in (_group(run.pgid) if run.pgid else []) + run.tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            leftover.kill()
    log.close()


def _airflow_pgid(eosflow: subprocess.Popen) -> int | None:
    """The process group of `airflow standalone`: eosflow's child, leader of a session of its own."""
    for child in psutil.Process(eosflow.pid).children():
        if "standalone" in " ".join(child.cmdline()):
            return os.getpgid(child.pid)
    return None


def test_sigterm_to_eosflow_stops_every_airflow_process_and_exits_0(eosflow_airflow):
    """Slow because `eosflow airflow` starts a whole `airflow standalone` (API server, scheduler, DAG
    processor, triggerer, its metadata database migrated) and the test waits until it answers before the
    SIGTERM: the stop itself takes seconds."""
    run = eosflow_airflow
    proc, port, log = run.proc, run.port, run.log
    deadline = time.monotonic() + 180
    pgid = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"eosflow airflow exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
        pgid = run.pgid = pgid or _airflow_pgid(proc)
        if pgid is not None and _healthy(port):
            break
        time.sleep(2)
    else:
        pytest.fail(f"the API did not answer in 180 s:\n{log.read_text()[-3000:]}")
    assert pgid != os.getpgid(proc.pid)  # its own group: a signal to eosflow alone reaches none of it
    running = _group(pgid)
    assert len(running) > 1, [p.cmdline() for p in running]  # the scheduler, API server, ... are up
    tree = run.tree = psutil.Process(proc.pid).children(recursive=True)  # and any that left the group

    proc.send_signal(signal.SIGTERM)  # to eosflow only, as systemd's KillMode=mixed or `kill` does
    code = proc.wait(timeout=90)

    left = _live(_group(pgid))
    assert left == [], f"eosflow exited {code}, airflow processes left running: {left}"
    strays = _live(tree)
    assert strays == [], f"processes eosflow started outside airflow's group left running: {strays}"
    assert code == 0, log.read_text()[-3000:]
    assert not _healthy(port)
    assert "stopping airflow" in log.read_text()
