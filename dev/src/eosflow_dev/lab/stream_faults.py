"""Faults against `eosflow stream`: kill -9 at every step boundary, a replay racing the stream, the broker
and Postgres restarting under it.

Each trial produces the lab's input (transactions of 50, one in ten aborted), runs the stream as its
supervisor would (a process of its own, started again after a crash), stops it with SIGTERM once the
table holds every committed event, and measures the table against the producer's manifest, never the
ledger; dbt checks I1-I6 after.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from eosflow_dev.lab.outcome import Trial
from eosflow_dev.lab.world import JobResult, Lab, LabPipeline
from eosflow_dev.produce.manifest import Manifest
from eosflow_dev.stack.kafka import KafkaService
from eosflow_dev.stack.postgres import PostgresService

DRAIN_TIMEOUT_S = 300.0


def start(lab: Lab, p: LabPipeline, log: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "eosflow.cli", "stream", "--pipeline", p.name, "--trigger", "300ms", *args],
        env=lab.job_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )


def finish(proc: subprocess.Popen, log: Path, timeout_s: float = DRAIN_TIMEOUT_S) -> JobResult:
    proc.wait(timeout_s)
    return JobResult(proc.returncode, log.read_text(errors="replace"))


def stop_when_drained(
    lab: Lab, p: LabPipeline, manifest: Manifest, proc: subprocess.Popen, log: Path
) -> JobResult:
    """SIGTERM once every committed event is in the table (or the stream ended, or the time is up)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while proc.poll() is None and time.monotonic() < deadline and lab.measure(p, manifest).lost:
        time.sleep(0.5)
    while proc.poll() is None and "streaming pipeline" not in log.read_text(errors="replace"):
        time.sleep(0.2)  # its signal handlers are in place once it says so
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return finish(proc, log)


def drain(lab: Lab, p: LabPipeline, manifest: Manifest, name: str) -> JobResult:
    log = lab.home / f"{p.name}.{name}.log"
    return stop_when_drained(lab, p, manifest, start(lab, p, log), log)


def _trial(
    lab: Lab, scenario: str, p: LabPipeline, manifest: Manifest, trial: int, faults: int, detail: str
) -> Trial:
    lab.log(f"  {scenario} [{p.mode}] trial {trial}: {detail}")
    return Trial.of(
        scenario,
        p.mode,
        "transactional",
        trial,
        lab.measure(p, manifest),
        invariants=lab.invariants(p),
        faults=faults,
        fault_detail=detail,
    )


def kill(lab: Lab, point: str, mode: str, trial: int) -> Trial:
    p = lab.pipeline(f"stream_kill_{point}", mode, trial)
    manifest = lab.produce(p, lab.seed + trial)
    log = lab.home / f"{p.name}.crash.log"
    crashed = finish(start(lab, p, log, EOSFLOW_CRASH_AT=point), log)
    faults = int(crashed.killed and f"SIGKILL at {point}" in crashed.stderr)
    restarted = drain(lab, p, manifest, "restart")
    detail = (
        f"killed at {point}: exit {crashed.returncode}; restarted, SIGTERM when drained: "
        f"exit {restarted.returncode}"
    )
    return _trial(lab, f"stream kill -9 {point}", p, manifest, trial, faults, detail)


def replay_race(lab: Lab, mode: str, trial: int) -> Trial:
    """A replay of a committed range commits while the stream stands in a batch, staged, not committed."""
    p = lab.pipeline("stream_replay_race", mode, trial)
    manifest = lab.produce(p, lab.seed + trial)
    first_log = lab.home / f"{p.name}.first.log"
    first = finish(start(lab, p, first_log, "--max-batches", "1", "--max-batch-records", "60"), first_log)
    with psycopg.connect(lab.settings.warehouse_dsn) as conn:
        start_, end = conn.execute(
            "select start_offset, end_offset from eosflow.ledger where pipeline = %s and partition = 0 "
            "and end_offset > start_offset order by start_offset limit 1",
            (p.name,),
        ).fetchone()
    point = "after_stage"
    lab.clear_pause(point)
    log = lab.home / f"{p.name}.stream.log"
    proc = start(lab, p, log, EOSFLOW_PAUSE_AT=point)
    lab.wait_paused(point, proc, log=log)
    replay = lab.finish(
        subprocess.Popen(
            [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", p.name,
             "--run-id", f"replay-{trial}", "--range", f"{p.topic}:0:{start_}-{end}", "--mode", "replay"],
            env=lab.job_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
    )  # fmt: skip
    lab.resume(point)
    stopped = stop_when_drained(lab, p, manifest, proc, log)
    lab.clear_pause(point)
    faults = int(first.returncode == 0 and replay.returncode == 0)
    detail = (
        f"first batch exit {first.returncode}; replay of {p.topic}[0] [{start_}, {end}) exit "
        f"{replay.returncode} while the stream stood staged; stream exit {stopped.returncode}"
    )
    return _trial(lab, "stream + replay race", p, manifest, trial, faults, detail)


def broker_restart(lab: Lab, mode: str, trial: int, outage_s: float = 4.0) -> Trial:
    p = lab.pipeline("stream_broker", mode, trial)
    manifest = lab.produce(p, lab.seed + trial)
    kafka = KafkaService(lab.settings)
    before = kafka.pid()
    point = "before_read"
    lab.clear_pause(point)
    log = lab.home / f"{p.name}.stream.log"
    proc = start(lab, p, log, EOSFLOW_PAUSE_AT=point)
    lab.wait_paused(point, proc, log=log)
    kafka.stop(log=lab.log)
    lab.resume(point)
    time.sleep(outage_s)
    kafka.start(log=lab.log)
    stopped = stop_when_drained(lab, p, manifest, proc, log)
    lab.clear_pause(point)
    after = kafka.pid()
    faults = int(before is not None and after is not None and before != after)
    retried = stopped.stderr.count("retrying in")
    detail = (
        f"broker pid {before} -> {after}, down {outage_s:.0f}s+restart as a batch began to read; "
        f"{retried} batch(es) retried; stream exit {stopped.returncode}"
    )
    return _trial(lab, "stream broker restart", p, manifest, trial, faults, detail)


def postgres_restart(lab: Lab, mode: str, trial: int) -> Trial:
    p = lab.pipeline("stream_pg", mode, trial)
    manifest = lab.produce(p, lab.seed + trial)
    pg = PostgresService(lab.settings)
    point = "after_stage"
    lab.clear_pause(point)
    log = lab.home / f"{p.name}.stream.log"
    proc = start(lab, p, log, EOSFLOW_PAUSE_AT=point)
    lab.wait_paused(point, proc, log=log)
    before = pg.pid()
    pg.stop(log=lab.log)
    pg.start(log=lab.log)
    after = pg.pid()
    lab.resume(point)
    stopped = stop_when_drained(lab, p, manifest, proc, log)
    lab.clear_pause(point)
    faults = int(before is not None and after is not None and before != after)
    retried = stopped.stderr.count("retrying in")
    detail = (
        f"postgres pid {before} -> {after} with a batch staged, not committed; {retried} batch(es) retried; "
        f"stream exit {stopped.returncode}"
    )
    return _trial(lab, "stream postgres restart", p, manifest, trial, faults, detail)
