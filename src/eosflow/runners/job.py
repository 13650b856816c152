"""One ingestion run, step by step as docs/DESIGN.md says: plan, read, transform, then the pipeline's sink
writes and commits (eosflow.sinks.protocol).

`run()` is what `eosflow ingest` and the spark-submit entry point (eosflow.spark.job_main) both call.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import psycopg

from eosflow import pipelines
from eosflow.delivery import Delivery
from eosflow.faults import fault_point
from eosflow.ledger import positions, store
from eosflow.ledger.migrate import migrate
from eosflow.ledger.planner import TopicRecreatedError, plan_partitions
from eosflow.ledger.ranges import Plan, batch_id_for
from eosflow.runners.summary import RunSummary
from eosflow.schema import user_transform
from eosflow.schema.avro import RegistryAuthenticationError, RegistryConfig, RegistryUnavailableError
from eosflow.schema.declaration import REGISTRY_FORMATS
from eosflow.settings import Settings
from eosflow.sinks.protocol import Run
from eosflow.sources.kafka import lag_group
from eosflow.sources.kafka.offsets import partition_offsets, topic_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from eosflow.transform import TransformResult

Log = Callable[[str], None]
# How a run gets its SparkSession when its plan is too large to read in process (None: get_spark's,
# the active session or a new one; the stream passes the one it keeps, started when first needed).
SparkSource = Callable[[], "SparkSession"]
IDLE = "idle"  # nothing to read and nothing to establish: no plan persisted (run(skip_idle=True))


def new_run_id() -> str:
    return f"manual__{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}_{uuid.uuid4().hex[:6]}"


def run(
    settings: Settings,
    pipeline_name: str,
    run_id: str | None = None,
    max_records: int | None = None,
    acknowledge_data_loss: bool = False,
    log: Log = print,
    skip_idle: bool = False,
    spark: SparkSource | None = None,
) -> RunSummary:
    """A scheduled (or manual) run: plan every partition from the stored positions, then commit.

    skip_idle: when no partition has anything to read or establish, persist no plan and return the
    outcome IDLE (the stream's micro-batches, which would otherwise leave a plan per trigger).
    spark: where a plan past EOSFLOW_INLINE_MAX_OFFSETS gets its SparkSession (see SparkSource)."""
    pipeline = pipelines.load(settings, pipeline_name)
    run_id = run_id or new_run_id()
    batch_id = batch_id_for(pipeline.name, run_id)

    def make_plan(conn: psycopg.Connection, version: int) -> tuple[Plan | None, str | None]:
        return _plan(
            conn,
            settings,
            pipeline,
            run_id,
            batch_id,
            max_records,
            acknowledge_data_loss,
            version,
            log,
            skip_idle,
        )

    return execute(settings, pipeline, batch_id, make_plan, log, spark)


def prepare(
    settings: Settings,
    pipeline_name: str,
    run_id: str,
    log: Log = print,
    acknowledge_data_loss: bool = False,
) -> tuple[Plan, str | None]:
    """Step 1 alone: plan and persist (or find) the run's plan; the orchestrator's plan task."""
    pipeline = pipelines.load(settings, pipeline_name)
    if pipeline.schema.transform is not None:
        user_transform.load(pipeline.schema.transform)  # not found: the plan task says so, not Spark
    migrate(settings.warehouse_dsn, log=log)
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        store.refuse_a_moved_pipeline(conn, pipeline)
        pipeline.sink.prepare(conn, settings, pipeline, log)
        version = store.declaration_version(conn, pipeline)
        batch_id = batch_id_for(pipeline.name, run_id)
        plan, status = _plan(
            conn, settings, pipeline, run_id, batch_id, None, acknowledge_data_loss, version, log
        )
        assert plan is not None  # skip_idle is off: an idle plan is persisted too
        return plan, status


def execute(
    settings: Settings,
    pipeline: pipelines.Pipeline,
    batch_id: str,
    make_plan: Callable[[psycopg.Connection, int], tuple[Plan | None, str | None]],
    log: Log,
    spark: SparkSource | None = None,
) -> RunSummary:
    """Steps 2 to 5 of the contract, the same for every kind of plan."""
    summary = RunSummary(pipeline.name, batch_id)
    timer = _Timer(summary.phases)
    within = _Timer(summary.within)
    if pipeline.schema.transform is not None:
        user_transform.load(pipeline.schema.transform)  # not found: say so before planning anything
    registry = registry_for(settings, pipeline)
    migrate(settings.warehouse_dsn, log=log)
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        version = store.declaration_version(conn, pipeline)
        _refuse_another_declaration(conn, pipeline, batch_id, version)  # before the target changes
        store.refuse_a_moved_pipeline(conn, pipeline)
        pipeline.sink.prepare(conn, settings, pipeline, log)
        with timer("plan"):
            plan, status = make_plan(conn, version)
        if plan is None:
            summary.outcome = IDLE
            return summary
        summary.plan, summary.reused_plan = plan, status is not None
        if status is not None:
            log(
                f"reusing the plan persisted for {batch_id} ({status}): a retry reads exactly the same ranges"
            )
        if status == "committed":
            summary.outcome = positions.ALREADY_COMMITTED
            log(f"batch {batch_id} committed earlier: nothing to do")
            return summary
        log(
            f"{plan.kind} plan: " + "; ".join(f"{r} ({r.span:,} offsets)" for r in plan.nonempty)
            if plan.nonempty
            else "plan: no new records in any partition"
        )
        if pipeline.delivery != Delivery.EXACTLY_ONCE:
            log(f"delivery {pipeline.delivery}: the commit is split in two transactions (see DESIGN.md)")
        fault_point("after_plan")

        run = Run(
            settings,
            pipeline,
            plan,
            log,
            read=lambda phase: _checked_read(settings, pipeline, plan, registry, timer, phase, spark),
            time=timer,
            time_within=within,
            check_topics_unchanged=lambda: _check_topic_unchanged(settings, plan),
        )
        written = pipeline.sink.write(conn, run)  # steps 2 to 4, in the Spark tasks
        summary.outcome, summary.counts = pipeline.sink.commit(conn, run, written)  # step 5
        fault_point("after_commit")
        if summary.outcome == positions.COMMITTED and plan.kind != "replay" and pipeline.consumer_group:
            lag_group.report(settings.kafka, pipeline.consumer_group, plan, log)  # step 7, outside it
    return summary


def registry_for(settings: Settings, pipeline: pipelines.Pipeline) -> RegistryConfig | None:
    """The schema registry an Avro or Protobuf pipeline decodes with; refused before planning when unset."""
    schema = pipeline.schema
    reads = [f for f in (schema.format, schema.key_format) if f in REGISTRY_FORMATS]
    if not reads:
        return None
    if settings.registry is None:
        raise pipelines.PipelineConfigError(
            f"pipeline {pipeline.name!r} reads {' and '.join(reads)}, and no schema registry is "
            "configured: set EOSFLOW_SCHEMA_REGISTRY_URL to its Confluent-compatible API (the local stack "
            "runs one unless EOSFLOW_REGISTRY_PORT is 0)"
        )
    return settings.registry


def _refuse_another_declaration(
    conn: psycopg.Connection, pipeline: pipelines.Pipeline, batch_id: str, version: int
) -> None:
    """A retry of a batch planned under another declaration: refused, as its rows would differ."""
    existing = store.load_plan(conn, batch_id)
    if existing is None:
        return
    plan, status = existing
    if status == "planned" and plan.declaration_version not in (None, version):
        raise pipelines.PipelineConfigError(
            f"pipeline {pipeline.name!r}: its declaration changed since batch {batch_id} was planned "
            f"(version {plan.declaration_version} then, {version} now), and a retry must check its "
            "records exactly as the first attempt did. Nothing of the batch was committed: restore the "
            "declaration to finish this run, or start a new run (a new run id) under the new one"
        )


def _plan(
    conn: psycopg.Connection,
    settings: Settings,
    pipeline: pipelines.Pipeline,
    run_id: str,
    batch_id: str,
    max_records: int | None,
    acknowledge_data_loss: bool,
    declaration_version: int,
    log: Log,
    skip_idle: bool = False,
) -> tuple[Plan | None, str | None]:
    existing = store.load_plan(conn, batch_id)
    if existing is not None:
        return existing
    first_run = not store.has_committed(conn, pipeline.name)
    parts = []
    for topic in pipeline.topics:
        current_id = topic_id(settings.kafka, topic, settings.kafka_timeout_s)
        kafka = partition_offsets(settings.kafka, topic, pipeline.initial_offset, settings.kafka_timeout_s)
        if not first_run:
            # The initial policy is for a pipeline's first run; a partition (or topic) added later
            # starts at its beginning, or records produced to it before this run would be skipped.
            kafka = {p: dataclasses.replace(o, initial=None) for p, o in kafka.items()}
        parts += plan_partitions(
            pipeline.name,
            topic,
            kafka,
            store.positions(conn, pipeline.name, topic),
            max_records or pipeline.max_records_per_partition,
            acknowledge_data_loss,
            current_id,
            store.stored_topic_ids(conn, pipeline.name, topic),
        )
    if skip_idle and not any(p.range.span or p.first_seen or p.lost for p in parts):
        return None, None
    saved = store.save_plan(
        conn, Plan(batch_id, pipeline.name, run_id, tuple(parts), declaration_version=declaration_version)
    )
    return saved, None


def _check_topic_unchanged(settings: Settings, plan: Plan) -> None:
    """The topic read is the one planned: re-created in between, its offsets would be other records."""
    for topic, planned in sorted({(p.range.topic, p.topic_id) for p in plan.partitions if p.topic_id}):
        current = topic_id(settings.kafka, topic, settings.kafka_timeout_s)
        if current != planned:
            raise TopicRecreatedError(plan.pipeline, topic, planned, current)


@contextmanager
def _checked_read(
    settings: Settings,
    pipeline: pipelines.Pipeline,
    plan: Plan,
    registry: RegistryConfig | None,
    timer: _Timer,
    phase: str,
    spark_source: SparkSource | None = None,
) -> Iterator[TransformResult]:
    """Steps 2 and 3 for every sink: each task reads its planned range and checks it, in Spark or, for a
    small plan, in this process (eosflow.sources.kafka.inline); the caller's sink writes it inside this
    block, which times it as `phase` and turns the tasks' errors into ours."""
    from eosflow.sources.kafka.inline import InlineRead, reads_inline
    from eosflow.sources.kafka.range_read import ReadDataLossError, ReadStalledError
    from eosflow.spark.server_code import ServerCodeError
    from eosflow.spark.worker_errors import raised_in_workers
    from eosflow.transform import RecordSource, transform

    source: RecordSource
    with ExitStack() as cleanup:
        if reads_inline(plan, settings.inline_max_offsets):
            source = InlineRead(settings.kafka, plan)
        else:
            from eosflow.sources.kafka.read import PlannedRead
            from eosflow.spark.session import get_spark

            with timer("spark start"):
                if spark_source is None:
                    spark = get_spark(settings, f"eosflow-ingest-{pipeline.name}")
                    if settings.spark_remote:  # the run's own session on the server: it ends with the run
                        from eosflow.spark import connect

                        cleanup.callback(connect.close, spark)
                else:
                    spark = spark_source()
            source = PlannedRead(spark, settings.kafka, plan)
            if settings.spark_remote:
                from eosflow.spark import connect
                from eosflow.spark.server_code import Checked

                if (code := connect.installed_code(spark)) is not None:  # a warm server: its eosflow runs
                    source = Checked(source, code)
        fault_point("before_read")
        with (
            timer(phase),
            raised_in_workers(
                user_transform.TransformContractError,
                RegistryAuthenticationError,
                RegistryUnavailableError,
                ReadDataLossError,
                ReadStalledError,
                ServerCodeError,
            ),
        ):
            yield transform(
                source,
                pipeline=pipeline.name,
                batch_id=plan.batch_id,
                transform_version=pipeline.transform_version,
                max_value_bytes=pipeline.max_value_bytes,
                schema=pipeline.schema,
                declaration_version=plan.declaration_version,
                registry=registry,
            )


class _Timer:
    def __init__(self, phases: dict[str, float]) -> None:
        self.phases = phases

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.monotonic() - started
