"""`eosflow airflow` stops Airflow's whole process group on SIGTERM, SIGHUP or Ctrl-C (no Airflow here:
a shell and its children in a session of their own stand in for `airflow standalone`)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from eosflow_dev.stack import airflow_local


def _fake_airflow(script: str, processes: int = 3) -> subprocess.Popen:
    """sh -c script in a session of its own, once all its processes run."""
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(airflow_local._group_alive(proc.pid)) < processes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(airflow_local._group_alive(proc.pid)) == processes
    return proc


def test_stop_group_waits_for_every_process_of_the_group_not_only_the_leader():
    # The leader exits at once on SIGTERM; its children take a moment (as Airflow's components do).
    proc = _fake_airflow(
        "trap 'exit 0' TERM; sh -c 'trap \"sleep 1; exit 0\" TERM; sleep 300 & wait' & sleep 300 & wait",
        processes=4,
    )
    lines: list[str] = []
    started = time.monotonic()
    airflow_local.stop_group(proc, timeout=20, log=lines.append)
    assert airflow_local._group_alive(proc.pid) == []
    assert lines == [], lines  # stopped by SIGTERM, not killed after the timeout (which names what was left)
    assert time.monotonic() - started < 15


def test_stop_group_kills_what_ignores_sigterm_after_the_timeout():
    proc = _fake_airflow("trap '' TERM; sleep 300 & sleep 300 & wait")
    lines: list[str] = []
    started = time.monotonic()
    airflow_local.stop_group(proc, timeout=1, log=lines.append)
    assert airflow_local._group_alive(proc.pid) == []
    assert time.monotonic() - started < 10
    assert lines and "did not stop in 1s: killing 3 process(es)" in lines[0]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_serve_stops_the_group_and_returns_0_on_a_signal(monkeypatch, signum):
    started: list[subprocess.Popen] = []

    def start(settings, log=print):
        started.append(_fake_airflow("sleep 300 & sleep 300 & wait"))
        return started[-1]

    monkeypatch.setattr(airflow_local, "start", start)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    lines: list[str] = []
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signum))
    timer.start()
    try:
        assert airflow_local.serve(None, log=lines.append) == 0
    finally:
        timer.cancel()
    assert airflow_local._group_alive(started[0].pid) == []
    assert started[0].returncode is not None  # reaped
    assert f"{signal.Signals(signum).name}: stopping airflow" in lines
    assert {s: signal.getsignal(s) for s in before} == before  # pytest's own handlers are back


def test_serve_stops_on_sigint_even_where_the_process_was_left_ignoring_it(monkeypatch):
    """A parent may leave SIGINT ignored (a job started with & in a script) or a library may have replaced
    its handler (PySpark's, in a process that once ran Spark): serve handles SIGINT itself."""
    started: list[subprocess.Popen] = []

    def start(settings, log=print):
        started.append(_fake_airflow("sleep 20 & sleep 20 & wait"))  # the old code waited these out
        return started[-1]

    monkeypatch.setattr(airflow_local, "start", start)
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)
    lines: list[str] = []
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        assert airflow_local.serve(None, log=lines.append) == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # what it was given, back
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, inherited)
    assert "SIGINT: stopping airflow" in lines
    assert airflow_local._group_alive(started[0].pid) == []


def test_serve_returns_airflow_s_own_exit_code_when_it_ends_by_itself(monkeypatch):
    monkeypatch.setattr(
        airflow_local, "start", lambda settings, log=print: subprocess.Popen(["sh", "-c", "exit 3"])
    )
    assert airflow_local.serve(None, log=lambda m: None) == 3


@pytest.mark.parametrize(("raw", "seconds"), [("", 30.0), ("5", 5.0), ("0", 30.0), ("soon", 30.0)])
def test_the_stop_timeout_comes_from_the_environment_and_a_bad_value_keeps_30s(monkeypatch, raw, seconds):
    monkeypatch.setenv("EOSFLOW_AIRFLOW_STOP_TIMEOUT", raw)
    assert airflow_local.stop_timeout() == seconds
