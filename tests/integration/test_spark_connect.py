"""Runs through a warm Spark: the stack's Spark Connect server (Spark 4.3's plugin, `--with spark-connect`),
one session per run, the tasks on the server's kept Python workers running its installed eosflow, which they
check is the run's own; and an isolating server (Spark's own SparkConnectServer), to which a run ships its
code as a session artifact (DESIGN.md, "A warm Spark").

Every run here goes through Spark (EOSFLOW_INLINE_MAX_OFFSETS=0), against the real broker, Postgres and
server: exactly once, the tasks' checks done on the server's Python workers, sessions of two runs apart, the
server killed mid-run (the run fails with nothing committed, its retry on the restarted server commits once)
and restarted between runs.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest

from eosflow.spark import connect
from eosflow.verify import verify_pipeline
from eosflow_dev.stack.spark_connect import SparkConnectService
from tests.integration.ingest_case import IngestCase

pytestmark = pytest.mark.integration

BAD = [b"not json", b'{"event_id": 1}']


@pytest.fixture
def warm(case: IngestCase, spark_connect: str) -> IngestCase:
    """The case's settings sending every run's Spark work to the stack's server."""
    case.settings = dataclasses.replace(case.settings, spark_remote=spark_connect, inline_max_offsets=0)
    return case


def _remote_env(case: IngestCase) -> dict[str, str]:
    return {"EOSFLOW_SPARK_REMOTE": case.settings.spark_remote, "EOSFLOW_INLINE_MAX_OFFSETS": "0"}


def test_a_run_through_spark_connect_lands_every_record_once_and_rejects_the_bad_ones(warm) -> None:
    from confluent_kafka import Producer

    manifest = warm.produce(400, seed=61, partitions=3)
    producer = Producer({"bootstrap.servers": warm.settings.bootstrap_servers})
    for value in BAD:
        producer.produce(warm.topic, value=value, key=b"bad", partition=2)
    producer.flush(10)

    summary = warm.ingest()
    assert summary.outcome == "committed", summary
    assert sorted(warm.event_ids()) == sorted(str(a.event_id) for a in manifest.visible())
    assert len(warm.rejected()) == len(BAD)  # checked on the server's Python workers, kept as rows
    assert "spark start" in summary.phases  # it went through Spark, not the inline path
    result = verify_pipeline(warm.settings, warm.name)
    assert result.ok, result.table()

    again = warm.ingest()  # a second run, a second session: nothing new, nothing twice
    assert again.outcome == "committed" and again.records_read == 0
    # pyspark's builder switches the process to remote sessions for good; the run switches it back, so a
    # local session asked for later in this process (a run without a server, a test's) is a local one
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ


def _worker_daemons(server_pid: int) -> set[int]:
    """The pids of the server's Python worker daemons (eosflow.spark.worker_daemon): the JVM's children; the
    workers are the daemon's, forked with its command line."""
    import psutil

    found = set()
    for p in psutil.Process(server_pid).children():
        try:
            if "eosflow.spark.worker_daemon" in " ".join(p.cmdline()):
                found.add(p.pid)
        except psutil.Error:  # a zombie (spark-submit's launcher shell, reaped by nobody) or gone
            continue
    return found


def test_a_warm_server_keeps_its_python_workers_and_its_tasks_check_they_run_the_runs_code(
    warm, settings, monkeypatch
) -> None:
    """No artifact: the server's installed eosflow runs, its digest checked in each task; the worker daemon
    that imported it is the same across runs (SPARK-54055's factory per session is an isolating server's)."""
    from eosflow.spark import code_archive

    opened = []
    open_session = connect.open_session

    def recorded(settings, app_name):
        opened.append(open_session(settings, app_name))
        opened.append(connect.installed_code(opened[-1]))
        return opened[-2]

    monkeypatch.setattr(connect, "open_session", recorded)
    server = SparkConnectService(settings).pid()
    assert server is not None
    warm.produce(50, seed=67, partitions=2)
    assert warm.ingest().outcome == "committed"
    daemons = _worker_daemons(server)
    assert len(daemons) == 1
    warm.produce(50, seed=68, partitions=2)
    assert warm.ingest().outcome == "committed"
    assert _worker_daemons(server) == daemons  # kept, not one per session
    assert opened[1] == opened[3] == code_archive.code_digest()  # what the tasks checked: our code


def test_a_warm_server_refuses_a_run_whose_code_is_not_its_installed_eosflow(warm, monkeypatch) -> None:
    """The run's code is not what the server's workers imported (a new version here, the old one there):
    refused in the task, before a record is read, naming both, exit 2."""
    from eosflow.runners.outcomes import reported
    from eosflow.spark import code_archive, server_code

    warm.produce(30, seed=69, partitions=1)
    monkeypatch.setattr(code_archive, "code_digest", lambda source=None: "0123456789abcdef")
    with pytest.raises(server_code.ServerCodeError) as refused:
        warm.ingest()
    code, line = reported(refused.value)
    assert code == 2
    assert "this run's code is 0123456789abcdef" in line and "Install this eosflow" in line
    assert warm.event_ids() == [] and warm.ledger() == []


@pytest.fixture(scope="module")
def isolating_server(settings):
    """Spark's own SparkConnectServer (artifact isolation always on), stopped after this module: 1 GiB."""
    from eosflow_dev.stack.spark_connect import IsolatingSparkConnectService

    server = IsolatingSparkConnectService(settings)
    server.start(log=lambda m: None)
    yield server.endpoint()
    server.stop(log=lambda m: None)


def test_on_an_isolating_server_a_run_ships_its_code_as_a_session_artifact(
    case, isolating_server, monkeypatch
) -> None:
    """The code travels with the session, so no task compares digests: a client whose code differs from
    the server's installed eosflow still runs (its own code), where a warm server refuses it."""
    from eosflow.spark import code_archive

    manifest = case.produce(60, seed=70, partitions=2)
    case.settings = dataclasses.replace(case.settings, spark_remote=isolating_server, inline_max_offsets=0)
    monkeypatch.setattr(code_archive, "code_digest", lambda source=None: "0123456789abcdef")
    summary = case.ingest()
    assert summary.outcome == "committed", summary
    assert sorted(case.event_ids()) == sorted(str(a.event_id) for a in manifest.visible())
    assert verify_pipeline(case.settings, case.name).ok


def test_two_sessions_on_the_server_never_see_each_others_state(spark_connect, settings) -> None:
    warm_settings = dataclasses.replace(settings, spark_remote=spark_connect)
    first = connect.open_session(warm_settings, "eosflow-tests-a")
    second = connect.open_session(warm_settings, "eosflow-tests-b")
    try:
        assert first.session_id != second.session_id
        first.range(3).createOrReplaceTempView("only_in_first")
        first.conf.set("spark.sql.shuffle.partitions", "7")
        assert [t.name for t in first.catalog.listTables()] == ["only_in_first"]
        assert [t.name for t in second.catalog.listTables()] == []
        assert second.conf.get("spark.sql.shuffle.partitions") == "4"  # the session's own default
    finally:
        connect.close(first)
        connect.close(second)


def test_a_server_that_does_not_answer_fails_the_run_before_anything_is_read(case) -> None:
    """About 13 s of the client's retries (spark/connect.py RETRY), where its default waits 10 minutes."""
    from eosflow.runners.outcomes import reported

    case.produce(20, seed=62, partitions=1)
    case.settings = dataclasses.replace(case.settings, spark_remote="sc://127.0.0.1:9", inline_max_offsets=0)
    with pytest.raises(connect.SparkConnectUnavailableError) as failed:
        case.ingest(run_id="nobody")
    code, line = reported(failed.value)
    assert code == 1  # a retry may find it back
    assert "the Spark Connect server at sc://127.0.0.1:9 did not answer (UNAVAILABLE" in line
    assert "nothing was read or written" in line
    assert case.event_ids() == [] and case.ledger() == []
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ


def test_the_server_killed_mid_run_fails_it_with_nothing_committed_and_its_retry_commits_once(
    warm, tmp_path, settings
) -> None:
    """The server is SIGKILLed while the run stands at before_read (its session open, nothing read), then
    started again; the retry of the same run id commits every record once."""
    manifest = warm.produce(300, seed=63, partitions=3)
    env = warm.env(EOSFLOW_PAUSE_AT="before_read", EOSFLOW_FAULT_DIR=str(tmp_path), **_remote_env(warm))
    cmd = [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", warm.name, "--run-id", "killed"]
    run = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (tmp_path / "before_read.paused").exists():
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-3000:]
        time.sleep(0.2)
    server = SparkConnectService(settings)
    pid = server.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    while server.pid() is not None:
        time.sleep(0.2)
    (tmp_path / "before_read.resume").write_text("go")
    _, err = run.communicate(timeout=300)
    assert run.returncode == 1, err[-3000:]
    assert warm.event_ids() == [] and warm.ledger() == []  # nothing committed

    server.start(log=lambda m: None)  # restarted: the retry opens a new session on it
    retry = warm.ingest_process("--run-id", "killed", **_remote_env(warm))
    assert retry.returncode == 0, retry.stderr[-3000:]
    assert sorted(warm.event_ids()) == sorted(str(a.event_id) for a in manifest.visible())
    assert verify_pipeline(warm.settings, warm.name).ok


def test_a_stream_keeps_one_session_and_opens_another_after_a_batch_that_lost_it(warm, monkeypatch) -> None:
    """Its session ended under it (as a restarted server forgets it): one batch fails with nothing committed,
    and the next opens a new session and commits."""
    import threading

    from eosflow.runners.stream import StreamOptions, stream

    opened = []
    open_session = connect.open_session

    def recorded(settings, app_name):
        opened.append(open_session(settings, app_name))
        return opened[-1]

    monkeypatch.setattr(connect, "open_session", recorded)
    first = warm.produce(200, seed=64, partitions=2)

    def landed() -> int:  # the target appears with the first commit
        (exists,) = warm.query("select to_regclass(%s) is not null", warm.table)[0]
        return len(warm.event_ids()) if exists else 0

    stop, lines = threading.Event(), []
    streaming = threading.Thread(
        target=stream,
        args=(warm.settings, warm.name, StreamOptions(trigger_s=0.3), stop, lines.append),
    )
    streaming.start()
    try:
        _until(lambda: landed() == len(first.visible()), streaming)
        second = warm.produce(100, seed=65, partitions=2)
        _until(lambda: landed() == len(first.visible()) + len(second.visible()), streaming)
        assert len(opened) == 1  # kept across the batches
        opened[0].stop()  # the session is gone; the stream does not know yet
        third = warm.produce(100, seed=66, partitions=2)
        expected = [*first.visible(), *second.visible(), *third.visible()]
        _until(lambda: landed() == len(expected), streaming)
    finally:
        stop.set()
        streaming.join(120)
    assert len(opened) == 2, lines
    assert any("failed (1 in a row), nothing of it committed" in line for line in lines), lines
    assert sorted(warm.event_ids()) == sorted(str(a.event_id) for a in expected)
    assert warm.violations() == []
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ  # the stream ended its session


def _until(condition, streaming, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert streaming.is_alive(), "the stream stopped"
        assert time.monotonic() < deadline, "the stream did not land the records in time"
        time.sleep(0.3)
