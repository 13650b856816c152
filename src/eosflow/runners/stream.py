"""`eosflow stream`: one long-running process, one SparkSession, micro-batches through the batch protocol.

Each micro-batch is an ordinary batch (`job.run`) with a run id of its own, `stream__<start>_<n>`: planned
from the ledger's positions, read read_committed, checked, staged and committed, or produced with its
offsets for a Kafka sink, exactly as a scheduled run. Only the SparkSession outlives a batch; a batch small
enough to read without Spark (most of a stream's, once it has caught up: eosflow.sources.kafka.inline) runs
in this process, and the session is started by the first batch that needs it, then kept. There is no
checkpoint directory: the ledger is the only position, so a stream restarted after a crash, a batch run,
a backfill or a replay all plan from the same place. With a Spark Connect server (EOSFLOW_SPARK_REMOTE) the
kept session is the stream's own on that server; a failed batch drops it, and the next batch opens a new one
(a restarted server knows no session of before).

A batch fenced by another run that committed first (a scheduled run, a backfill chunk) is abandoned, as
a fenced batch run is, and the next batch re-plans from the positions that run left. An idle trigger
(nothing new in any partition) persists no plan. A stop request (SIGTERM, Ctrl-C) is honoured between
batches: the batch in flight commits or fails as a whole first.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from eosflow import pipelines
from eosflow.ledger import positions
from eosflow.ledger.ranges import Plan
from eosflow.runners import job
from eosflow.runners.stream_merge import Merger
from eosflow.runners.stream_status import BatchFigures, StreamStatus, first_line
from eosflow.runners.summary import RunSummary
from eosflow.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Log = Callable[[str], None]
MAX_BACKOFF_S = 30.0
# A failed batch commits nothing, so the stream may try again: the broker or Postgres restarting, a Spark
# task lost. After this many failures in a row it stops (exit 1) and its supervisor decides.
MAX_FAILURES_IN_A_ROW = 5
STREAM_SPARK_CONF = {
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "2000",
    "spark.sql.ui.retainedExecutions": "50",
}


@dataclass(frozen=True)
class StreamOptions:
    trigger_s: float = 2.0  # a batch starts this often; at once while a partition still has lag
    max_batch_records: int | None = None  # per partition per batch (default: the pipeline's)
    status_every: int = 10  # a status line every N batches, over those N
    max_batches: int | None = None  # stop after this many batches (tests, benchmarks)
    max_seconds: float | None = None  # stop after this long
    every_batch: bool = False  # a line per non-idle batch: outcome, records, time per step
    # Merge the small pieces the stream's own commits left, this often, beside the batches
    # (Sink.compact_stream, stream_merge.Merger); None: never.
    compact_every_s: float | None = 60.0


def run_id_prefix() -> str:
    return f"stream__{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}_{uuid.uuid4().hex[:6]}"


def stream(
    settings: Settings,
    pipeline_name: str,
    options: StreamOptions = StreamOptions(),
    stop: threading.Event | None = None,
    log: Log = print,
) -> StreamStatus:
    """Micro-batches until `stop` is set (or max_batches/max_seconds); returns the figures."""
    from eosflow.spark.session import get_spark

    stop = stop or threading.Event()
    pipeline = pipelines.load(settings, pipeline_name)
    prefix = run_id_prefix()
    status = StreamStatus(window=options.status_every, run_prefix=prefix)
    session: list[SparkSession] = []  # the stream's one SparkSession, once a batch needed it

    def spark() -> SparkSession:
        """One JVM for the stream's life, started by the first batch past EOSFLOW_INLINE_MAX_OFFSETS: it
        keeps what its JIT compiles, unlike a batch run's JVM, and a bounded history of its jobs (Spark's
        default, 1,000 jobs and SQL executions with their tasks, is a quarter hour of one-second batches
        in the driver's heap). A stream whose batches all read in process never starts it."""
        if not session:
            started = time.monotonic()
            session.append(
                get_spark(settings, f"eosflow-stream-{pipeline.name}", jit="", extra=STREAM_SPARK_CONF)
            )
            _warm_up(session[0], pipeline)
            log(
                f"started Spark for a batch past EOSFLOW_INLINE_MAX_OFFSETS ({settings.inline_max_offsets:,} "
                f"offsets) in {time.monotonic() - started:.1f}s; the stream keeps it for later batches"
            )
        return session[0]

    log(
        f"streaming pipeline {pipeline.name} ({', '.join(pipeline.topics)} -> {_output(pipeline)}): a batch "
        f"every {options.trigger_s:g}s, run ids {prefix}_<n>; stop with SIGTERM or Ctrl-C"
    )
    started = last_end = time.monotonic()
    backoff, n, failures = 1.0, 0, 0
    every = options.compact_every_s
    merger = Merger(settings, pipeline, every, log).start() if every is not None else None
    try:
        while not stop.is_set():
            n += 1
            batch_started = time.monotonic()
            try:
                summary = job.run(
                    settings,
                    pipeline.name,
                    f"{prefix}_{n:06d}",
                    options.max_batch_records,
                    log=lambda m: None,
                    skip_idle=True,
                    spark=spark,
                )
            except positions.FencedError as exc:
                log(f"batch {n} fenced, re-planning from the positions the other run left: {exc}")
                summary = RunSummary(pipeline.name, f"{prefix}_{n:06d}", outcome="fenced")
            except Exception as exc:
                if _needs_a_person(exc) or failures + 1 >= MAX_FAILURES_IN_A_ROW:
                    raise
                failures += 1
                if settings.spark_remote and session:  # the server may have lost it: the next batch opens one
                    _end_session(settings, session.pop())
                log(
                    f"batch {n} failed ({failures} in a row), nothing of it committed; retrying in "
                    f"{backoff:.0f}s: {type(exc).__name__}: {first_line(exc)}"
                )
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            backoff, failures = 1.0, 0
            done = time.monotonic()
            try:
                latencies = _latencies(settings, pipeline, summary, time.time())
            except psycopg.Error as exc:  # a figure, read after the commit: never worth the stream
                latencies = ()
                log(
                    f"batch {n} committed; its latencies could not be read back, left out of the figures: "
                    f"{type(exc).__name__}: {first_line(exc)}"
                )
            figures = BatchFigures(
                summary.batch_id,
                summary.outcome,
                summary.records_read,
                done - last_end,
                _lag(summary.plan),
                latencies,
            )
            last_end = done
            status.add(figures)
            if summary.outcome == positions.COMMITTED:
                status.committed(summary)
            if options.every_batch and summary.outcome != job.IDLE:
                log(_batch_line(n, summary, done - batch_started))
            if status.total_batches % options.status_every == 0:
                log(status.line())
            if options.max_batches is not None and status.total_batches >= options.max_batches:
                break
            if options.max_seconds is not None and done - started >= options.max_seconds:
                break
            if figures.outcome != positions.COMMITTED or not any(figures.lag.values()):
                stop.wait(max(0.0, options.trigger_s - (time.monotonic() - batch_started)))
    finally:
        if merger is not None:
            merger.stop()
        for started_session in session:
            _end_session(settings, started_session)
    log(f"stopped after {time.monotonic() - started:.0f}s: {status.line()}")
    return status


def _end_session(settings: Settings, spark: SparkSession) -> None:
    """Stop the stream's Spark: its JVM, or its session on a Spark Connect server (which also takes the
    process out of Spark Connect mode; a session the server already lost stops without a word)."""
    if not settings.spark_remote:
        spark.stop()
        return
    from eosflow.spark import connect

    with contextlib.suppress(Exception):  # noqa: BLE001 - a dead server's session: nothing left to end
        connect.close(spark)


def _needs_a_person(exc: Exception) -> bool:
    """A refusal no retry can change (a declaration error, a data loss to acknowledge, a re-created
    topic, counts that do not add up): the exit codes 2, 4 and 5 of `eosflow ingest`."""
    from eosflow.runners.outcomes import EXIT

    return any(isinstance(exc, kind) and code in (2, 4, 5) for kind, code in EXIT.items())


def _warm_up(spark: SparkSession, pipeline: pipelines.Pipeline) -> None:
    """Start the Python workers and import what a batch's tasks import, before the first batch: its
    records would otherwise wait for it (the first batch took 6.7 s of a 1 s trigger's budget)."""
    modules = ("eosflow.transform", *pipeline.sink.task_modules)

    def import_task_modules(batches: Iterator[Any]) -> Iterator[Any]:
        import importlib

        for name in modules:
            importlib.import_module(name)
        yield from batches

    spark.range(0, 8, numPartitions=8).mapInArrow(import_task_modules, "id long").collect()


def _batch_line(n: int, summary: RunSummary, seconds: float) -> str:
    steps = ", ".join(f"{k} {v:.2f}s" for k, v in summary.phases.items())
    return f"batch {n}: {summary.outcome}, {summary.records_read:,} records in {seconds:.2f}s ({steps})"


def _output(pipeline: pipelines.Pipeline) -> str:
    return pipeline.sink.output


def _lag(plan: Plan | None) -> dict[str, int]:
    if plan is None:
        return {}
    return {f"{p.range.topic}[{p.range.partition}]": p.lag_after for p in plan.partitions}


def _latencies(
    settings: Settings, pipeline: pipelines.Pipeline, summary: RunSummary, committed_at: float
) -> tuple[float, ...]:
    """Seconds from each committed record's Kafka timestamp to `committed_at`, where the sink can read
    them back (Sink.latencies); none for a batch that committed nothing new."""
    if summary.outcome != positions.COMMITTED or summary.plan is None:
        return ()
    return pipeline.sink.latencies(settings, pipeline, summary.plan, committed_at)
