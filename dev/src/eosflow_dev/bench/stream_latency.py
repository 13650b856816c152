"""`eosflow bench --stream`: `eosflow stream` under a steady load, measured from the warehouse.

A paced producer writes the orders stream at a fixed rate for a fixed time to a topic of its own while
`eosflow stream` (a process of its own, as it runs in production) ingests it. Measured afterwards:

- latency per record: the commit transaction's time (eosflow.plans.committed_at) minus the record's
  Kafka timestamp (CreateTime, stamped by the producer as it sends): p50/p95/p99 over the run and per
  minute, so a drift shows;
- per batch: records and wall time (the stream's --every-batch lines); the fixed cost is the intercept
  of batch time over records (least squares), and the median time of batches under 1,000 records;
- memory: the stream's process tree (Python driver + Spark JVM) sampled every 10 s;
- exactly once: every produced event in the target once.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import psycopg
import yaml

from eosflow.kafka_admin import ensure_topic
from eosflow_dev.bench.memory import MB
from eosflow_dev.produce import events
from eosflow_dev.stack.settings import StackSettings

Log = Callable[[str], None]
_BATCH = re.compile(r"batch (\d+): committed, ([\d,]+) records in ([\d.]+)s")


@dataclass(frozen=True)
class StreamBenchResult:
    rate: int
    seconds: float
    trigger: str
    partitions: int
    produced: int
    committed: int
    distinct: int
    latency: tuple[float, float, float]  # p50, p95, p99 over the run
    per_minute: list[tuple[int, int, float, float, float]]  # minute, records, p50, p95, p99
    batches: list[tuple[int, float]]  # records, seconds
    memory_mib: list[tuple[float, float]]  # seconds since start, RSS of the stream's tree
    achieved_rate: float
    stream_exit: int
    notes: list[str] = field(default_factory=list)

    @property
    def exactly_once(self) -> bool:
        return self.produced == self.committed == self.distinct

    def fixed_cost(self) -> tuple[float, float]:
        """(intercept, seconds per 1,000 records) of batch time over records, least squares."""
        xs, ys = [r for r, _ in self.batches], [s for _, s in self.batches]
        if len(set(xs)) < 2:
            return (statistics.median(ys) if ys else 0.0, 0.0)
        slope, intercept = statistics.linear_regression(xs, ys)
        return intercept, slope * 1000

    def markdown(self, header: str) -> str:
        p50, p95, p99 = self.latency
        intercept, per_k = self.fixed_cost()
        small = [s for r, s in self.batches if r < 1000]
        mem = [m for _, m in self.memory_mib] or [0.0]
        settled = [m for t, m in self.memory_mib if t >= 60] or mem
        lines = [
            header,
            "",
            f"{self.produced:,} events at {self.rate:,}/s for {self.seconds:.0f} s (achieved "
            f"{self.achieved_rate:,.0f}/s) into {self.partitions} partitions; `eosflow stream --trigger "
            f"{self.trigger}`; exit {self.stream_exit} on SIGTERM.",
            "",
            "| figure | value |",
            "|---|---:|",
            f"| latency p50 (Kafka timestamp to commit) | {p50:.2f} s |",
            f"| latency p95 | {p95:.2f} s |",
            f"| latency p99 | {p99:.2f} s |",
            f"| batches that committed records | {len(self.batches):,} |",
            f"| records per batch, median | {statistics.median([r for r, _ in self.batches] or [0]):,.0f} |",
            f"| batch time, median | {statistics.median([s for _, s in self.batches] or [0]):.2f} s |",
            f"| per-batch fixed cost (intercept of time over records) | {intercept:.2f} s |",
            f"| time per 1,000 records (slope) | {per_k:.3f} s |",
            f"| batch time under 1,000 records, median ({len(small)} batches) | "
            f"{statistics.median(small) if small else float('nan'):.2f} s |",
            f"| stream RSS (driver + Spark JVM), first / last / max after 60 s | "
            f"{mem[0]:,.0f} / {mem[-1]:,.0f} / {max(settled):,.0f} MiB |",
            f"| committed / distinct / produced | {self.committed:,} / {self.distinct:,} / "
            f"{self.produced:,} |",
            "",
            "Per minute (by Kafka timestamp):",
            "",
            "| minute | records | p50 s | p95 s | p99 s |",
            "|---:|---:|---:|---:|---:|",
            *(f"| {m} | {n:,} | {a:.2f} | {b:.2f} | {c:.2f} |" for m, n, a, b, c in self.per_minute),
            "",
            "Memory (RSS of the stream's process tree, MiB), every 10 s:",
            "",
            " ".join(f"{m:,.0f}" for _, m in self.memory_mib),
        ]
        if self.notes:
            lines += ["", *(f"- {n}" for n in self.notes)]
        return "\n".join(lines) + "\n"


def run(
    settings: StackSettings,
    run_id: str,
    rate: int,
    seconds: float,
    partitions: int,
    trigger: str,
    work_dir: Path,
    log: Log,
) -> StreamBenchResult:
    name = f"bench_stream_{run_id}"
    topic, table = f"bench.stream.{run_id}", f"raw.{name}"
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "pipelines.yml"
    root = yaml.safe_load((settings.root / "pipelines.yml").read_text())["pipelines"]["orders"]
    config.write_text(
        yaml.safe_dump({"pipelines": {name: {**root, "topics": [topic], "target_table": table}}})
    )
    ensure_topic(settings.kafka, topic, partitions, log=log)
    stream_log = work_dir / "stream.log"
    log(f"starting eosflow stream for {name} (log: {stream_log})")
    proc = subprocess.Popen(
        [sys.executable, "-m", "eosflow.cli", "stream", "--pipeline", name, "--trigger", trigger,
         "--every-batch", "--status-every", "30"],
        env={**os.environ, "EOSFLOW_PIPELINES": str(config)},
        stdout=subprocess.DEVNULL,
        stderr=stream_log.open("w"),
    )  # fmt: skip
    memory: list[tuple[float, float]] = []
    stop_sampling = threading.Event()
    t0 = time.monotonic()

    def sample() -> None:
        while not stop_sampling.wait(10.0):
            memory.append((time.monotonic() - t0, _tree_rss(proc.pid) / MB))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        _wait_for(lambda: "streaming pipeline" in stream_log.read_text(), proc, 180, stream_log)
        time.sleep(5.0)  # the first (idle) batches: Spark's Python workers up before the clock starts
        produced, achieved = _produce_paced(settings, topic, rate, seconds, log)
        log(f"produced {produced:,} events ({achieved:,.0f}/s); waiting for the stream to commit them")
        _wait_for(lambda: _count(settings, table) >= produced, proc, 300, stream_log)
    finally:
        stop_sampling.set()
        proc.send_signal(signal.SIGTERM)
        exit_code = proc.wait(120)
    committed, distinct = _counts(settings, table)
    text = stream_log.read_text()
    batches = [(int(m[2].replace(",", "")), float(m[3])) for m in _BATCH.finditer(text)]
    return StreamBenchResult(
        rate, seconds, trigger, partitions, produced, committed, distinct, _latency(settings, table),
        _per_minute(settings, table), batches, memory, achieved, exit_code,
    )  # fmt: skip


def _tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0


def _wait_for(ready: Callable[[], bool], proc: subprocess.Popen, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"eosflow stream exited ({proc.returncode}); see {log_path}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s; see {log_path}")
        time.sleep(0.5)


def _produce_paced(
    settings: StackSettings, topic: str, rate: int, seconds: float, log: Log
) -> tuple[int, float]:
    """`rate` events per second for `seconds`, in 10 ms ticks; the CreateTime is the send time."""
    from confluent_kafka import Producer

    producer = Producer({**settings.kafka, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    stream = events.generate(uuid.uuid4().int % 2**31, int(rate * seconds))
    sent, started = 0, time.monotonic()
    next_report = started + 60
    for event in stream:
        due = started + sent / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        while True:
            try:
                producer.produce(topic, value=event.value, key=event.key)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        sent += 1
        if time.monotonic() >= next_report:
            log(f"  {sent:,} events sent")
            next_report += 60
    elapsed = time.monotonic() - started
    if producer.flush(60):
        raise RuntimeError("the paced producer could not deliver everything in 60 s")
    return sent, sent / elapsed


def _count(settings: StackSettings, table: str) -> int:
    with psycopg.connect(settings.warehouse_dsn) as conn:
        return conn.execute(f"select count(*) from {table}").fetchone()[0]


def _counts(settings: StackSettings, table: str) -> tuple[int, int]:
    with psycopg.connect(settings.warehouse_dsn) as conn:
        return conn.execute(f"select count(*), count(distinct event_id) from {table}").fetchone()


_LATENCY = (
    "extract(epoch from p.committed_at - t.kafka_timestamp)"  # per record: its commit minus its timestamp
)


def _latency(settings: StackSettings, table: str) -> tuple[float, float, float]:
    query = (
        f"select percentile_cont(array[0.5, 0.95, 0.99]) within group (order by {_LATENCY}) "
        f"from {table} t join eosflow.plans p using (batch_id)"
    )
    with psycopg.connect(settings.warehouse_dsn) as conn:
        return tuple(conn.execute(query).fetchone()[0])


def _per_minute(settings: StackSettings, table: str) -> list[tuple[int, int, float, float, float]]:
    query = (
        "with r as (select t.kafka_timestamp, " + _LATENCY + " as latency "
        f"from {table} t join eosflow.plans p using (batch_id)), "
        "m as (select floor(extract(epoch from kafka_timestamp - min(kafka_timestamp) over ()) / 60)::int "
        "as minute, latency from r) "
        "select minute, count(*), percentile_cont(array[0.5, 0.95, 0.99]) within group (order by latency) "
        "from m group by minute order by minute"
    )
    with psycopg.connect(settings.warehouse_dsn) as conn:
        return [(m, n, *p) for m, n, p in conn.execute(query)]
