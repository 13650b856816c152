"""One ingestion run, step by step as ../shared/DESIGN.md says: plan, read, transform, stage, commit.

`run()` is what `eosflow ingest` and the spark-submit entry point (spark/ingest_job.py) both call.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from datetime import UTC, datetime

import psycopg

from eosflow.faults import crash_point
from eosflow.ingest import commit as commit_mod
from eosflow.ingest import pipelines, store
from eosflow.ingest.kafka_offsets import partition_offsets
from eosflow.ingest.planner import plan_partitions
from eosflow.ingest.ranges import Plan, batch_id_for
from eosflow.ingest.summary import RunSummary
from eosflow.settings import Settings
from eosflow.warehouse.migrate import migrate

Log = Callable[[str], None]


def new_run_id() -> str:
    return f"manual__{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}_{uuid.uuid4().hex[:6]}"


def run(
    settings: Settings,
    pipeline_name: str,
    run_id: str | None = None,
    max_records: int | None = None,
    acknowledge_data_loss: bool = False,
    log: Log = print,
) -> RunSummary:
    pipeline = pipelines.load(settings, pipeline_name)
    run_id = run_id or new_run_id()
    summary = RunSummary(pipeline.name, batch_id_for(pipeline.name, run_id))
    timer = _Timer(summary.phases)
    migrate(settings.warehouse_dsn, log=log)

    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        store.ensure_target(conn, pipeline)
        with timer("plan"):
            plan, status = _plan(
                conn, settings, pipeline, run_id, summary.batch_id, max_records, acknowledge_data_loss, log
            )
        summary.plan = plan
        summary.reused_plan = status is not None
        if status == "committed":
            summary.outcome = commit_mod.ALREADY_COMMITTED
            log(f"batch {summary.batch_id} committed earlier: nothing to do")
            return summary
        log(
            "plan: " + "; ".join(f"{r} ({r.span:,} offsets)" for r in plan.nonempty)
            if plan.nonempty
            else "plan: no new records in any partition"
        )
        crash_point("after_plan")

        records_read: dict[tuple[str, int], int] = {}
        if plan.nonempty:
            records_read = _read_transform_stage(settings, pipeline, plan, timer, log)
        with timer("commit"):
            summary.outcome, summary.counts = commit_mod.commit(conn, pipeline, plan, records_read)
        crash_point("after_commit")
    return summary


def _plan(
    conn,
    settings: Settings,
    pipeline: pipelines.Pipeline,
    run_id: str,
    batch_id: str,
    max_records: int | None,
    acknowledge_data_loss: bool,
    log: Log,
) -> tuple[Plan, str | None]:
    existing = store.load_plan(conn, batch_id)
    if existing is not None:
        plan, status = existing
        log(f"reusing the plan persisted for {batch_id} ({status}): a retry reads exactly the same ranges")
        return plan, status
    kafka = partition_offsets(settings.bootstrap_servers, pipeline.topic, pipeline.initial_offset)
    if store.has_committed(conn, pipeline.name):
        # The initial policy is for a pipeline's first run; a partition added later starts at its
        # beginning, or records produced to it before this run would be skipped.
        kafka = {p: dataclasses.replace(o, initial=None) for p, o in kafka.items()}
    parts = plan_partitions(
        pipeline.name,
        pipeline.topic,
        kafka,
        store.positions(conn, pipeline.name, pipeline.topic),
        max_records or pipeline.max_records_per_partition,
        acknowledge_data_loss,
    )
    saved = store.save_plan(conn, Plan(batch_id, pipeline.name, run_id, tuple(parts)))
    return saved, None


def _read_transform_stage(
    settings: Settings, pipeline: pipelines.Pipeline, plan: Plan, timer: _Timer, log: Log
) -> dict[tuple[str, int], int]:
    from eosflow.ingest.read import check_within_plan, partition_stats, read_plan
    from eosflow.ingest.spark_session import get_spark
    from eosflow.ingest.stage import stage
    from eosflow.ingest.transform import transform_orders

    with timer("spark start"):
        spark = get_spark(settings, f"eosflow-ingest-{pipeline.name}")
    with timer("read"):
        source = read_plan(spark, settings.bootstrap_servers, plan).persist()
        records_read = check_within_plan(plan, partition_stats(source, plan))
    log(f"read {sum(records_read.values()):,} records")
    crash_point("after_read")
    with timer("transform+stage"):
        result = transform_orders(
            source,
            pipeline=pipeline.name,
            batch_id=plan.batch_id,
            transform_version=pipeline.transform_version,
            max_value_bytes=pipeline.max_value_bytes,
        )
        stage(settings, pipeline, plan.batch_id, result.valid, result.rejected)
    source.unpersist()
    crash_point("after_stage")
    return records_read


class _Timer:
    def __init__(self, phases: dict[str, float]) -> None:
        self.phases = phases

    @contextmanager
    def __call__(self, name: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.monotonic() - started
