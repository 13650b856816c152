"""Faults against `eosflow publish`: an outbox published to Kafka while the publisher is killed, fenced by
a second one, or loses its broker or its Postgres.

Each trial fills an outbox of its own with the lab's events, in transactions of 50 with one in ten rolled
back (the rows that must never appear), runs the publisher with one real fault, runs it again (as a
scheduler would) until the outbox is drained, and reads the topic back read_committed: lost = committed
rows absent from the topic, duplicated = records beyond one per row. The publisher's own position is never
consulted.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass

import psycopg

from eosflow.sources.kafka.read_back import partitions_of, read_to_end
from eosflow_dev.lab.outcome import Tally, Trial
from eosflow_dev.lab.world import MODE_TAGS, PUBLISH_MODES, Lab
from eosflow_dev.produce import events
from eosflow_dev.stack.kafka import KafkaService
from eosflow_dev.stack.postgres import PostgresService

EXIT_FENCED = 3


@dataclass(frozen=True)
class LabPublisher:
    name: str
    table: str
    topic: str
    mode: str


@dataclass(frozen=True)
class Filled:
    attempted: int
    committed: frozenset[str]  # event ids in committed rows


def declare(lab: Lab, scenario: str, mode: str, trial: int) -> LabPublisher:
    name = f"lab_{scenario}_{MODE_TAGS[mode]}_{trial}_{time.time_ns() % 10**8:08d}"
    p = LabPublisher(name, f"lab_outbox.{name}", f"lab.published.{name}", mode)
    with psycopg.connect(lab.settings.warehouse_dsn, autocommit=True) as conn:
        conn.execute("create schema if not exists lab_outbox")
        conn.execute(
            f"create table {p.table} (id bigserial primary key, event_id text not null, customer_id text, "
            "body jsonb not null, eosflow_xid xid8 not null default pg_current_xact_id())"
        )
        conn.execute(f"create index on {p.table} (eosflow_xid, id)")
    lab.publishers[name] = {
        "table": p.table,
        "topic": p.topic,
        "id": "id",
        "key": "customer_id",
        "batch_rows": 50,
        "batch_seconds": 0.2,
        "delivery": PUBLISH_MODES[mode],
    }
    lab.write_declarations()
    return p


def fill(lab: Lab, p: LabPublisher, seed: int) -> Filled:
    rng = random.Random(seed)
    committed: set[str] = set()
    attempted = 0
    batch: list[str] = []
    with psycopg.connect(lab.settings.warehouse_dsn) as conn:
        for e in events.generate(seed, lab.records):
            body = json.loads(e.value)
            conn.execute(
                f"insert into {p.table} (event_id, customer_id, body) values (%s, %s, %s)",
                (body["event_id"], body.get("customer_id"), e.value.decode()),
            )
            attempted += 1
            batch.append(body["event_id"])
            if len(batch) == 50:
                if rng.random() < 0.1:
                    conn.rollback()
                else:
                    conn.commit()
                    committed.update(batch)
                batch = []
        conn.commit()
        committed.update(batch)
    return Filled(attempted, frozenset(committed))


def start(lab: Lab, p: LabPublisher, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "eosflow.cli", "publish", "--pipeline", p.name],
        env=lab.job_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(lab: Lab, p: LabPublisher, **env: str):
    return lab.finish(start(lab, p, **env), timeout_s=300)


def measure(lab: Lab, p: LabPublisher, filled: Filled) -> tuple[Tally, str]:
    kafka = lab.settings.kafka
    seen = Counter(
        json.loads(m.value())["event_id"]
        for m in read_to_end(kafka, [(p.topic, q, -2) for q in partitions_of(kafka, p.topic)])
    )
    lost = sum(1 for eid in filled.committed if not seen[eid])
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    foreign = sum(n for eid, n in seen.items() if eid not in filled.committed)  # rolled-back rows
    tally = Tally(filled.attempted, len(filled.committed), len(filled.committed) - lost, lost, duplicated)
    problems = [
        f"{what} {n}"
        for what, n in (("lost", lost), ("duplicated", duplicated), ("rolled back", foreign))
        if n
    ]
    return tally, "pass" if not problems else "fail: " + ", ".join(problems)


def _trial(
    lab: Lab, scenario: str, p: LabPublisher, filled: Filled, trial: int, faults: int, detail: str
) -> Trial:
    final = run(lab, p)  # the next scheduled run drains what is left
    detail += f"; next run exit {final.returncode}"
    lab.log(f"  {scenario} [{p.mode}] trial {trial}: {detail}")
    tally, verdict = measure(lab, p, filled)
    return Trial.of(
        scenario, p.mode, "outbox", trial, tally, invariants=verdict, faults=faults, fault_detail=detail
    )


def kill(lab: Lab, point: str, mode: str, trial: int) -> Trial:
    p = declare(lab, f"pub_kill_{point}", mode, trial)
    filled = fill(lab, p, lab.seed + trial)
    first = run(lab, p, EOSFLOW_CRASH_AT=point)
    faults = int(first.killed and f"SIGKILL at {point}" in first.stderr)
    return _trial(
        lab,
        f"publisher kill -9 {point}",
        p,
        filled,
        trial,
        faults,
        f"killed at {point}: exit {first.returncode}",
    )


def zombie(lab: Lab, mode: str, trial: int) -> Trial:
    """Publisher A stalls inside its first batch; B starts and publishes everything; A wakes."""
    p = declare(lab, "pub_zombie", mode, trial)
    filled = fill(lab, p, lab.seed + trial)
    point = "publish_in_transaction"
    lab.clear_pause(point)
    old = start(lab, p, EOSFLOW_PAUSE_AT=point)
    lab.wait_paused(point, old)
    newer = run(lab, p)
    lab.resume(point)
    woke = lab.finish(old)
    lab.clear_pause(point)
    faults = int(newer.returncode == 0 and woke.returncode != -9)
    detail = (
        f"newer publisher exit {newer.returncode} while the old one stood in its batch; "
        f"the old one woke, exit {woke.returncode}"
    )
    if woke.returncode == EXIT_FENCED:
        detail += " (fenced)"
    return _trial(lab, "publisher zombie wakes late", p, filled, trial, faults, detail)


def broker_restart(lab: Lab, mode: str, trial: int, outage_s: float = 4.0) -> Trial:
    p = declare(lab, "pub_broker", mode, trial)
    filled = fill(lab, p, lab.seed + trial)
    kafka = KafkaService(lab.settings)
    before = kafka.pid()
    point = "publish_before_batch"
    lab.clear_pause(point)
    job = start(lab, p, EOSFLOW_PAUSE_AT=point)
    lab.wait_paused(point, job)
    kafka.stop(log=lab.log)
    lab.resume(point)
    time.sleep(outage_s)
    kafka.start(log=lab.log)
    first = lab.finish(job, timeout_s=300)
    lab.clear_pause(point)
    after = kafka.pid()
    faults = int(before is not None and after is not None and before != after)
    detail = (
        f"broker pid {before} -> {after}, down {outage_s:.0f}s+restart as the first batch began; "
        f"exit {first.returncode}"
    )
    return _trial(lab, "publisher broker restart", p, filled, trial, faults, detail)


def postgres_restart(lab: Lab, mode: str, trial: int) -> Trial:
    p = declare(lab, "pub_pg", mode, trial)
    filled = fill(lab, p, lab.seed + trial)
    pg = PostgresService(lab.settings)
    point = "publish_in_transaction"
    lab.clear_pause(point)
    job = start(lab, p, EOSFLOW_PAUSE_AT=point)
    lab.wait_paused(point, job)
    before = pg.pid()
    pg.stop(log=lab.log)
    pg.start(log=lab.log)
    after = pg.pid()
    lab.resume(point)
    first = lab.finish(job, timeout_s=300)
    lab.clear_pause(point)
    faults = int(before is not None and after is not None and before != after)
    detail = (
        f"postgres pid {before} -> {after} with the publisher inside its first batch; exit {first.returncode}"
    )
    return _trial(lab, "publisher postgres restart", p, filled, trial, faults, detail)
