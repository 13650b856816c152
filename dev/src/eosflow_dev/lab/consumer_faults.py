"""Faults on the consumer side: the job killed, the broker or Postgres restarted, a zombie run.

Each scenario produces a fresh topic (transactional, some transactions aborted), injects one real
fault into an ingestion run, lets the orchestrator's retry (same run id) finish, then measures the
warehouse against the producer's manifest. A fault counts only once its effect was observed: the
process really died of SIGKILL, the broker's or Postgres's pid really changed while the job stood
at the named step, the zombie really woke after the newer run committed.
"""

from __future__ import annotations

import os
import signal
import time

from eosflow.faults import SINK_FAULT_POINTS
from eosflow_dev.lab.outcome import Trial
from eosflow_dev.lab.world import Lab, LabPipeline
from eosflow_dev.stack.kafka import KafkaService
from eosflow_dev.stack.postgres import PostgresService
from eosflow_dev.stack.spark_connect import SparkConnectService

CRASH_POINTS = ("after_plan", "after_read", "after_stage", "in_commit", "after_commit")
# A Kafka sink's run has no staging step; its tasks stand inside their Kafka transactions instead.
KAFKA_CRASH_POINTS = ("after_plan", "in_kafka_transaction", "in_commit", "after_commit")
EXIT_FENCED = 3


def crash(lab: Lab, point: str, mode: str, trial: int) -> Trial:
    """SIGKILL the job at a step boundary, then retry with the same run id."""
    p = lab.pipeline(f"crash_{point}", mode, trial)
    manifest = lab.produce(p, seed=lab.seed + trial)
    before = ""
    if p.changes:  # a first run commits the first half: the killed one changes rows a replica holds
        limit = lab.split_runs(p, manifest)
        earlier = lab.run_job(p, "r0")
        before = f"run r0 (up to {limit} offsets a partition) exit {earlier.returncode}; "
    first = lab.run_job(p, "r1", EOSFLOW_CRASH_AT=point)
    # Inside a Spark task the SIGKILL kills the task's Python worker: the job then fails (exit 1).
    died = first.killed or (point in SINK_FAULT_POINTS and first.returncode != 0)
    faults = int(died and f"SIGKILL at {point}" in first.stderr)
    retry = lab.run_job(p, "r1")
    detail = f"{before}killed at {point}: exit {first.returncode}"
    if not faults:  # it did not die where it was told to: say what stopped it instead
        detail += f" ({_last_error(first)})"
    detail += f"; retry (same run id) exit {retry.returncode}"
    return _trial(lab, f"kill -9 {point}", p, manifest, trial, faults, detail)


def broker_restart_mid_read(lab: Lab, mode: str, trial: int, outage_s: float = 4.0) -> Trial:
    """Stop the broker as the read starts, bring it back while Spark's consumers wait for it."""
    p = lab.pipeline("broker_restart", mode, trial)
    manifest = lab.produce(p, seed=lab.seed + trial)
    kafka = KafkaService(lab.settings)
    before = kafka.pid()
    lab.clear_pause("before_read")
    job = lab.start_job(p, "r1", EOSFLOW_PAUSE_AT="before_read")
    lab.wait_paused("before_read", job)
    kafka.stop(log=lab.log)
    lab.resume("before_read")
    time.sleep(outage_s)
    reading = job.poll() is None  # the job is still in its read while the broker is down
    kafka.start(log=lab.log)
    after = kafka.pid()
    first = lab.finish(job)
    lab.clear_pause("before_read")
    faults = int(before is not None and after is not None and before != after)
    detail = (
        f"broker pid {before} -> {after}, down {outage_s:.0f}s+restart while the job "
        f"{'was reading' if reading else 'had already ended'}; first attempt exit {first.returncode}"
    )
    if first.returncode != 0:
        retry = lab.run_job(p, "r1")
        detail += f" ({_last_error(first)}); retry exit {retry.returncode}"
    else:
        detail += " (the read waited the outage out)"
    return _trial(lab, "broker restart mid-read", p, manifest, trial, faults, detail)


def postgres_restart_mid_commit(lab: Lab, mode: str, trial: int) -> Trial:
    """Restart Postgres while the job stands inside its commit (between the two transactions of
    a split commit), then retry with the same run id."""
    p = lab.pipeline("pg_restart", mode, trial)
    manifest = lab.produce(p, seed=lab.seed + trial)
    pg = PostgresService(lab.settings)
    lab.clear_pause("in_commit")
    job = lab.start_job(p, "r1", EOSFLOW_PAUSE_AT="in_commit")
    lab.wait_paused("in_commit", job)
    before = pg.pid()
    pg.stop(log=lab.log)
    pg.start(log=lab.log)
    after = pg.pid()
    lab.resume("in_commit")
    first = lab.finish(job)
    lab.clear_pause("in_commit")
    faults = int(before is not None and after is not None and before != after)
    retry = lab.run_job(p, "r1")
    detail = (
        f"postgres pid {before} -> {after} with the job paused in its commit; first attempt exit "
        f"{first.returncode} ({_last_error(first)}); retry exit {retry.returncode}"
    )
    return _trial(lab, "postgres restart mid-commit", p, manifest, trial, faults, detail)


def spark_connect_kill(lab: Lab, mode: str, trial: int) -> Trial:
    """The job's Spark work on the lab's Spark Connect server (DESIGN.md "A warm Spark"), the server
    SIGKILLed while the job stands before its read (its session open), started again; the retry (same run
    id) opens a session on the new server."""
    p = lab.pipeline("sc_kill", mode, trial)
    manifest = lab.produce(p, seed=lab.seed + trial)
    server = SparkConnectService(lab.settings)
    server.start(log=lab.log)
    warm = {"EOSFLOW_SPARK_REMOTE": server.endpoint(), "EOSFLOW_INLINE_MAX_OFFSETS": "0"}
    lab.clear_pause("before_read")
    job = lab.start_job(p, "r1", EOSFLOW_PAUSE_AT="before_read", **warm)
    lab.wait_paused("before_read", job)
    before = server.pid()
    if before is not None:
        os.kill(before, signal.SIGKILL)
        while server.pid() is not None:
            time.sleep(0.1)
    lab.resume("before_read")
    first = lab.finish(job)
    lab.clear_pause("before_read")
    server.start(log=lab.log)
    after = server.pid()
    faults = int(before is not None and after is not None and first.returncode == 1)
    retry = lab.run_job(p, "r1", **warm)
    detail = (
        f"server pid {before} SIGKILLed with the job's session open, restarted as {after}; first attempt "
        f"exit {first.returncode} ({_last_error(first)}); retry exit {retry.returncode}"
    )
    return _trial(lab, "Spark Connect server killed mid-run", p, manifest, trial, faults, detail)


def zombie(lab: Lab, mode: str, trial: int) -> Trial:
    """Run A stalls after staging (a Kafka sink: inside its open Kafka transactions); run B (a new run
    id) reads the same offsets and commits; A wakes."""
    p = lab.pipeline("zombie", mode, trial)
    manifest = lab.produce(p, seed=lab.seed + trial)
    point = "in_kafka_transaction" if p.writes_to_kafka else "after_stage"
    lab.clear_pause(point)
    old = lab.start_job(p, "zombie", EOSFLOW_PAUSE_AT=point)
    lab.wait_paused(point, old)
    newer = lab.run_job(p, "newer")
    lab.resume(point)
    woke = lab.finish(old)
    lab.clear_pause(point)
    faults = int(newer.returncode == 0 and woke.returncode != -9)
    detail = (
        f"newer run committed (exit {newer.returncode}) while the old one stood staged; the old run "
        f"woke and exited {woke.returncode}" + (" (fenced)" if woke.returncode == EXIT_FENCED else "")
    )
    return _trial(lab, "zombie run wakes late", p, manifest, trial, faults, detail)


def _trial(lab: Lab, scenario: str, p: LabPipeline, manifest, trial: int, faults: int, detail: str) -> Trial:
    lab.log(f"  {scenario} [{p.mode}] trial {trial}: {detail}")
    return Trial.of(
        scenario,
        p.mode,
        "transactional",
        trial,
        lab.measure(p, manifest),
        replica=lab.replica(p, manifest),
        invariants=lab.invariants(p),
        faults=faults,
        fault_detail=detail,
    )


def _last_error(result) -> str:
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else "no output"
