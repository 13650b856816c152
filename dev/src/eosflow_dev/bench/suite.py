"""One bench cell: a topic of N records in P partitions, then each measurement on it, checked.

Measurements run one after the other, each in a process of its own, on the same loaded topic. Every
one that writes rows is checked afterwards: its table must hold exactly the loaded records, and all
tables of a cell must hold the same rows (equal digests). Tables and topics are dropped after the
check unless asked to keep them.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from eosflow import names
from eosflow.kafka_admin import admin
from eosflow.ledger.migrate import migrate
from eosflow_dev.bench import ceilings, eosflow_run, load, targets
from eosflow_dev.bench.measure import Measured, MeasurementFailed, run_measured, worker_result
from eosflow_dev.bench.results import MEASUREMENTS, OVERHEADS, WRITERS, Result
from eosflow_dev.stack.settings import StackSettings

Log = Callable[[str], None]


@dataclass(frozen=True)
class Cell:
    run_id: str  # names topics, tables and pipelines: letters, digits and _ only
    partitions: int
    records: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.run_id}_p{self.partitions}_n{self.records}"

    @property
    def topic(self) -> str:
        return f"bench.{self.name}"


@dataclass
class CellOutcome:
    results: list[Result] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # failed measurements and failed checks

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Context:
    settings: StackSettings
    cell: Cell
    workload: load.Workload
    work_dir: Path
    log: Log
    one_record_loaded: bool = False  # the 1-record topic the fixed-overhead runs read
    server_warmed: bool = False  # a run went through the stack's Spark Connect server already

    def result(self, measurement: str, measured: Measured, records: int, seconds: float, timed: str, **kw):
        return Result(
            run_id=self.cell.run_id,
            measurement=measurement,
            partitions=self.cell.partitions,
            loaded=self.cell.records,
            records=records,
            payload_bytes=self.workload.payload_bytes * records // max(self.workload.records, 1),
            seconds=seconds,
            wall_s=measured.wall_s,
            peak_rss_mib=measured.rss.total_mb,
            peak_jvm_rss_mib=measured.rss.jvm_mb,
            timed=timed,
            **kw,
        )

    def table(self, measurement: str) -> str:
        return f"{targets.SCHEMA}.{measurement.replace('-', '_')}_{self.cell.name}"

    def log_path(self, measurement: str) -> Path:
        return self.work_dir / "logs" / f"{self.cell.name}.{measurement}.log"


def _read_ceiling(ctx: _Context) -> Result:
    cmd = ceilings.consumer_performance_cmd(
        ctx.settings, ctx.workload.topic, ctx.workload.records, f"bench-cp-{ctx.cell.name}"
    )
    measured = run_measured("read ceiling", cmd, ctx.log_path("read-ceiling"), ctx.log)
    stats = ceilings.parse_consumer_performance(measured.stdout)
    return ctx.result(
        "read-ceiling",
        measured,
        int(stats["records"]),
        stats["fetch_s"],
        "fetching, as the tool reports it (JVM start and group join excluded)",
        detail=stats,
    )


def _write_ceiling(ctx: _Context, measurement: str = "write-ceiling", writers: int = 1) -> Result:
    assert ctx.workload.copy_file is not None
    table = ctx.table(measurement)
    with psycopg.connect(ctx.settings.warehouse_dsn, autocommit=True) as conn:
        targets.create_like_orders(conn, table)
    cmd = [sys.executable, "-m", "eosflow_dev.bench.ceilings", "copy", table, str(ctx.workload.copy_file)]
    label = "write ceiling" if writers == 1 else f"write ceiling, {writers} writers"
    measured = run_measured(label, cmd + ["--writers", str(writers)], ctx.log_path(measurement), ctx.log)
    stats = worker_result(measured, label)
    return ctx.result(
        measurement,
        measured,
        ctx.workload.records,
        stats["copy_s"],
        "COPY from the first byte to the commit" + ("" if writers == 1 else " of the last writer"),
        detail=stats,
    )


def _write_ceiling_parallel(ctx: _Context) -> Result:
    return _write_ceiling(ctx, "write-ceiling-2", writers=2)


def _eosflow(
    ctx: _Context,
    measurement: str = "eosflow",
    topic: str | None = None,
    records: int = 0,
    sink: dict | None = None,
    env: dict[str, str] | None = None,
) -> Result:
    topic = topic or ctx.workload.topic
    records = records or ctx.workload.records
    pipeline = names.fitted(f"bench_{measurement.replace('-', '_')}_{ctx.cell.name}")
    config = eosflow_run.write_pipelines_file(
        ctx.work_dir / f"{pipeline}.pipelines.yml", pipeline, topic, ctx.table(measurement), records, sink
    )
    measured = run_measured(
        f"eosflow ({records:,} records)",
        eosflow_run.ingest_cmd(pipeline),
        ctx.log_path(measurement),
        ctx.log,
        env=eosflow_run.ingest_env(config) | (env or {}),
    )
    summary = eosflow_run.parse_summary(measured.stdout)
    if summary.outcome not in eosflow_run.OUTCOME_OK:
        raise MeasurementFailed(f"eosflow ingest ended {summary.outcome}; see {measured.log_path}")
    detail = dict(summary.phases)
    detail["outside phases"] = max(measured.wall_s - sum(summary.phases.values()), 0.0)
    detail["rejected"] = float(summary.rejected)
    return ctx.result(
        measurement,
        measured,
        summary.written,
        measured.wall_s,
        "the `eosflow ingest` process, start to exit (plan to commit; Spark's start too when the plan is "
        "past EOSFLOW_INLINE_MAX_OFFSETS)",
        detail=detail,
    )


def _iceberg(ctx: _Context) -> Result:
    """The same run into an Iceberg table; counted back by a PyIceberg scan (every event once)."""
    from eosflow.sinks.iceberg.catalog import catalog

    name = f"bench_lake.iceberg_{ctx.cell.name}"
    iceberg = catalog(ctx.settings)
    try:
        result = _eosflow(ctx, "iceberg", sink={"sink": "iceberg", "table": name})
        events = iceberg.load_table(name).scan(selected_fields=("event_id",)).to_arrow().column(0)
        result.records = result.rows_checked = len(set(events.to_pylist()))
        if len(events) != result.records:
            raise MeasurementFailed(f"{name} holds {len(events):,} rows, {result.records:,} distinct events")
        return result
    finally:
        if iceberg.table_exists(name):
            iceberg.purge_table(name)  # its files too: a 1M-record table is ~100 MB


def _read_check(ctx: _Context) -> Result:
    """eosflow's read and check of the topic through Spark with nothing written (bench/read_check.py)."""
    pipeline = names.fitted(f"bench_read_check_{ctx.cell.name}")
    path = ctx.work_dir / f"{pipeline}.pipelines.yml"
    topic, records = ctx.workload.topic, ctx.workload.records
    config = eosflow_run.write_pipelines_file(path, pipeline, topic, ctx.table("read-check"), records)
    cmd = [sys.executable, "-m", "eosflow_dev.bench.read_check", "--pipeline", pipeline, "--topic", topic]
    cmd += ["--partitions", str(ctx.cell.partitions)]
    label = "read and check only"
    env = eosflow_run.ingest_env(config)
    measured = run_measured(label, cmd, ctx.log_path("read-check"), ctx.log, env=env)
    stats = worker_result(measured, label)
    timed = "its process, start to exit (Spark's start included, as in eosflow's)"
    return ctx.result("read-check", measured, int(stats["rows"]), measured.wall_s, timed, detail=stats)


def _overhead(ctx: _Context) -> Result:
    """A 1-record run as it runs by default: small enough to skip Spark (eosflow.sources.kafka.inline)."""
    return _eosflow(ctx, "overhead", _one_record_topic(ctx), 1)


def _overhead_spark(ctx: _Context) -> Result:
    """The same 1-record run through Spark: what a run past EOSFLOW_INLINE_MAX_OFFSETS pays to start."""
    env = {"EOSFLOW_INLINE_MAX_OFFSETS": "0"}
    return _eosflow(ctx, "overhead-spark", _one_record_topic(ctx), 1, env=env)


def _eosflow_warm(ctx: _Context) -> Result:
    """The same run with its Spark work on the stack's Spark Connect server, already running and warmed by
    a 1-record run: what a run costs where Spark is already up. The peak RSS is the CLI's process only (the
    Spark work is in the server's JVM)."""
    return _eosflow(ctx, "eosflow-warm", env=_through(_warm_server(ctx)))


def _overhead_warm(ctx: _Context) -> Result:
    """A 1-record run through the warm server (no inline read): the fixed cost left once Spark is up."""
    return _eosflow(ctx, "overhead-warm", _one_record_topic(ctx), 1, env=_through(_warm_server(ctx)))


def _warm_server(ctx: _Context) -> str:
    """The stack's Spark Connect server (started if need be), after one untimed 1-record run through it: the
    first session of a server loads classes and starts Python workers that later ones find."""
    from eosflow_dev.stack import optional

    url = optional.spark_connect(ctx.settings, log=ctx.log)
    if not ctx.server_warmed:
        _eosflow(ctx, "warm-up", _one_record_topic(ctx), 1, env=_through(url))
        with psycopg.connect(ctx.settings.warehouse_dsn, autocommit=True) as conn:
            targets.drop(conn, ctx.table("warm-up"))
        ctx.server_warmed = True
    return url


def _through(url: str) -> dict[str, str]:
    """A run's environment sending every plan, however small, to the Spark Connect server at `url`."""
    return {"EOSFLOW_SPARK_REMOTE": url, "EOSFLOW_INLINE_MAX_OFFSETS": "0"}


def _one_record_topic(ctx: _Context) -> str:
    topic = f"{ctx.cell.topic}.one"
    if not ctx.one_record_loaded:
        load.load_topic(
            ctx.settings, topic, ctx.cell.partitions, 1, ctx.cell.seed + 1, None, log=lambda m: None
        )
        ctx.one_record_loaded = True
    return topic


def _handwritten(ctx: _Context) -> Result:
    return _loop(ctx, "handwritten", "executemany loop", "--group", f"bench-hand-{ctx.cell.name}")


def _competent(ctx: _Context) -> Result:
    table = ctx.table("competent")
    try:
        return _loop(ctx, "competent", "competent loop")
    finally:  # its positions and rejected rows, beside the table the checks read
        with psycopg.connect(ctx.settings.warehouse_dsn, autocommit=True) as conn:
            targets.drop(conn, f"{table}_positions", f"{table}_rejected")


def _loop(ctx: _Context, measurement: str, label: str, *args: str) -> Result:
    """A single-process consumer loop (eosflow_dev.bench.<measurement>) into a table of its own."""
    table = ctx.table(measurement)
    with psycopg.connect(ctx.settings.warehouse_dsn, autocommit=True) as conn:
        targets.create_like_orders(conn, table)
    cmd = [
        sys.executable,
        "-m",
        f"eosflow_dev.bench.{measurement}",
        "--topic",
        ctx.workload.topic,
        "--table",
        table,
        "--partitions",
        str(ctx.cell.partitions),
        *args,
    ]
    measured = run_measured(label, cmd, ctx.log_path(measurement), ctx.log)
    stats = worker_result(measured, label)
    return ctx.result(
        measurement, measured, int(stats["rows"]), measured.wall_s, "its process, start to exit", detail=stats
    )


def _streaming(ctx: _Context) -> Result:
    table = ctx.table("streaming")
    checkpoint = ctx.work_dir / f"checkpoint-{ctx.cell.name}"
    shutil.rmtree(checkpoint, ignore_errors=True)
    with psycopg.connect(ctx.settings.warehouse_dsn, autocommit=True) as conn:
        targets.create_like_orders(conn, table)
    cmd = [
        sys.executable,
        "-m",
        "eosflow_dev.bench.streaming",
        "--topic",
        ctx.workload.topic,
        "--table",
        table,
        "--checkpoint",
        str(checkpoint),
    ]
    try:
        measured = run_measured("structured streaming", cmd, ctx.log_path("streaming"), ctx.log)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    stats = worker_result(measured, "structured streaming")
    return ctx.result(
        "streaming",
        measured,
        ctx.workload.records,  # replaced by the table's count when checked
        measured.wall_s,
        "its process, start to exit (Spark start included)",
        detail=stats,
    )


RUNNERS: dict[str, Callable[[_Context], Result]] = {
    "read-ceiling": _read_ceiling,
    "write-ceiling": _write_ceiling,
    "write-ceiling-2": _write_ceiling_parallel,
    "eosflow": _eosflow,
    "iceberg": _iceberg,
    "read-check": _read_check,
    "overhead": _overhead,
    "overhead-spark": _overhead_spark,
    "eosflow-warm": _eosflow_warm,
    "overhead-warm": _overhead_warm,
    "handwritten": _handwritten,
    "competent": _competent,
    "streaming": _streaming,
}
assert tuple(RUNNERS) == tuple(MEASUREMENTS)


def run_cell(
    settings: StackSettings,
    cell: Cell,
    only: Sequence[str],
    work_dir: Path,
    log: Log,
    keep: bool = False,
) -> CellOutcome:
    """Load the cell's topic, run each selected measurement on it, check every table written."""
    outcome = CellOutcome()
    work_dir.mkdir(parents=True, exist_ok=True)
    copy_file = work_dir / f"{cell.name}.rows.csv" if "write-ceiling" in only else None
    log(f"loading {cell.records:,} records into {cell.topic} ({cell.partitions} partitions, transactional)")
    workload = load.load_topic(settings, cell.topic, cell.partitions, cell.records, cell.seed, copy_file, log)
    log(
        f"loaded {workload.payload_mb:,.1f} MB in {workload.load_s:.1f} s "
        f"({cell.records / max(workload.load_s, 1e-9):,.0f} records/s)"
    )
    ctx = _Context(settings, cell, workload, work_dir, log)
    migrate(settings.warehouse_dsn, log=log)  # raw.orders, the template of every bench table
    selected = [m for m in MEASUREMENTS if m in only]
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        targets.ensure_schema(conn)
        for i, measurement in enumerate(selected, 1):
            log(f"[{i}/{len(selected)}] {MEASUREMENTS[measurement]}: running")
            started = time.monotonic()
            try:
                result = RUNNERS[measurement](ctx)
            except Exception as exc:  # noqa: BLE001 - one failure must not cost the other measurements
                outcome.problems.append(f"{measurement}: {exc}")
                log(f"[{i}/{len(selected)}] {measurement} FAILED: {exc}")
                continue
            if measurement in WRITERS or measurement in OVERHEADS:
                _check_table(conn, ctx, result, keep, outcome)
            elif result.records != cell.records:
                outcome.problems.append(f"{measurement}: read {result.records:,} of {cell.records:,} records")
            outcome.results.append(result)
            log(
                f"[{i}/{len(selected)}] {measurement}: {result.records:,} records in {result.seconds:.2f} s "
                f"({result.records_per_s:,.0f} records/s, peak RSS {result.peak_rss_mib:,.0f} MiB; "
                f"{time.monotonic() - started:.0f} s in all)"
            )
    _compare_digests(outcome)
    if not keep:
        _delete_topics(settings.bootstrap_servers, [cell.topic, f"{cell.topic}.one"], log)
        if copy_file is not None:
            copy_file.unlink(missing_ok=True)
    return outcome


def _check_table(conn, ctx: _Context, result: Result, keep: bool, outcome: CellOutcome) -> None:
    table = ctx.table(result.measurement)
    expected = 1 if result.measurement in OVERHEADS else ctx.cell.records
    if not targets.exists(conn, table):
        outcome.problems.append(f"{result.measurement}: its table {table} does not exist")
        return
    found = targets.check(conn, table)
    result.rows_checked = found.rows
    result.records = found.rows
    result.fingerprint = found.fingerprint
    if found.rows != expected or found.distinct_events != expected:
        outcome.problems.append(
            f"{result.measurement}: {table} holds {found.rows:,} rows ({found.distinct_events:,} distinct "
            f"events), expected {expected:,}"
        )
    if not keep:
        targets.drop(conn, table)  # eosflow's commit dropped its batch's staging table


def _compare_digests(outcome: CellOutcome) -> None:
    digests = {r.measurement: r.fingerprint for r in outcome.results if r.measurement in WRITERS}
    if len(set(digests.values())) > 1:
        outcome.problems.append(
            "the tables do not hold the same rows: " + ", ".join(f"{m} {d}" for m, d in digests.items())
        )


def _delete_topics(bootstrap: str, topics: list[str], log: Log) -> None:
    """Drop the cell's topics (a 4M-record topic holds about 1 GB); a topic that is not there is fine."""
    client = admin(bootstrap)  # keep a reference: the futures fail if the client is collected first
    for topic, future in client.delete_topics(topics, operation_timeout=30).items():
        try:
            future.result(timeout=30)
        except Exception as exc:  # noqa: BLE001 - cleanup only: a topic left behind is harmless
            if "UNKNOWN_TOPIC" not in str(exc):
                log(f"could not delete topic {topic}: {exc}")
