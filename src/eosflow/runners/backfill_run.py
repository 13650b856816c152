"""Backfills against the real Kafka and warehouse: resolve and validate a request, then run its chunks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime

import psycopg

from eosflow import pipelines
from eosflow.ledger import store
from eosflow.ledger.backfill import (
    BackfillError,
    BackfillRequest,
    check_chunk_count,
    chunks_of,
    plan_ranges,
    validate,
)
from eosflow.ledger.migrate import migrate
from eosflow.ledger.planner import PartitionOffsets, TopicRecreatedError, check_topic_identity
from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan, batch_id_for
from eosflow.pipelines import InitialOffset
from eosflow.runners import job
from eosflow.runners.summary import RunSummary
from eosflow.settings import Settings
from eosflow.sources.kafka.offsets import TopicMissingError, offsets_for_time, partition_offsets, topic_id


def _epoch_ms(text: str, name: str) -> int:
    try:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise BackfillError(f"{name} {text!r} is not an ISO-8601 time like 2026-01-01T00:00:00Z") from None
    if stamp.tzinfo is None:
        raise BackfillError(f"{name} {text!r} has no time zone; add Z or +01:00")
    return int(stamp.timestamp() * 1000)


def resolve(
    settings: Settings,
    request: BackfillRequest,
    from_time: str | None = None,
    to_time: str | None = None,
    max_chunks: int | None = None,
) -> list[OffsetRange]:
    """The validated chunks of a request, in the order they must commit. Raises BackfillError.

    max_chunks: the most chunks the runner takes (the backfill DAG: Airflow's core.max_map_length).
    """
    if (from_time or to_time) and (request.from_offset is not None or request.to_offset is not None):
        raise BackfillError("give offsets or times, not both")
    try:
        pipeline = pipelines.load(settings, request.pipeline)
    except pipelines.PipelineConfigError as exc:
        raise BackfillError(str(exc)) from None
    refuse_backfill(pipeline, request.mode)
    migrate(settings.warehouse_dsn, log=lambda m: None)
    topic = backfill_topic(pipeline, request.topic)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        facts = _Facts.read(settings, conn, pipeline, topic)
    kafka, positions, committed = facts.kafka, facts.positions, facts.committed
    if not (from_time or to_time):
        return validate(request, topic, kafka, positions, committed, max_chunks)

    # Times map to different offsets in each partition: validate partition by partition.
    chosen = request.partitions if request.partitions is not None else tuple(sorted(kafka))
    stable = {p: o.stable_end for p, o in kafka.items()}
    known = [p for p in chosen if p in kafka]
    starts = (
        offsets_for_time(settings.kafka, topic, known, _epoch_ms(from_time, "from time"), stable)
        if from_time
        else {}
    )
    ends = (
        offsets_for_time(settings.kafka, topic, known, _epoch_ms(to_time, "to time"), stable)
        if to_time
        else {}
    )
    if from_time and to_time and _epoch_ms(to_time, "to time") < _epoch_ms(from_time, "from time"):
        raise BackfillError(f"the range ends before it starts: to time {to_time} < from time {from_time}")
    ranges: list[OffsetRange] = []
    problems: list[str] = []
    for p in chosen:
        one = dataclasses.replace(request, partitions=(p,), from_offset=starts.get(p), to_offset=ends.get(p))
        try:
            ranges += plan_ranges(one, topic, kafka, positions, committed)
        except BackfillError as exc:
            problems.append(str(exc).split(": ", 1)[-1])
    if problems:
        raise BackfillError(
            f"backfill of {request.pipeline} refused, nothing was run: " + "; ".join(problems)
        )
    check_chunk_count(request, ranges, max_chunks)  # counted before any chunk exists
    return chunks_of(ranges, request.chunk_size)


def refuse_backfill(pipeline: pipelines.Pipeline, mode: str) -> None:
    """BackfillError if the pipeline's sink cannot take a backfill of this mode (a replay into Kafka)."""
    pipeline.sink.refuse_backfill(pipeline, mode)


def backfill_topic(pipeline: pipelines.Pipeline, topic: str | None) -> str:
    """The topic a backfill request is of: the one named, or the pipeline's only one."""
    if topic is None:
        if len(pipeline.topics) > 1:
            raise BackfillError(
                f"pipeline {pipeline.name!r} reads {', '.join(pipeline.topics)}: a backfill is of one topic; "
                "name it (--topic); nothing was run"
            )
        return pipeline.topics[0]
    if topic not in pipeline.topics:
        raise BackfillError(
            f"pipeline {pipeline.name!r} does not read {topic!r}; it reads {', '.join(pipeline.topics)}"
        )
    return topic


class _Facts:
    """What Kafka and the warehouse say about a pipeline's topic, as a backfill is validated against."""

    def __init__(
        self,
        kafka: dict[int, PartitionOffsets],
        positions: dict[int, int | None],
        committed: dict[int, tuple[int, int]],
        topic_id: str,
    ) -> None:
        self.kafka, self.positions, self.committed, self.topic_id = kafka, positions, committed, topic_id

    @classmethod
    def read(
        cls, settings: Settings, conn: psycopg.Connection, pipeline: pipelines.Pipeline, topic: str
    ) -> _Facts:
        """Raises BackfillError for a missing or re-created topic: nothing can be backfilled then."""
        try:
            current = topic_id(settings.kafka, topic, settings.kafka_timeout_s)
            kafka = partition_offsets(
                settings.kafka, topic, InitialOffset("earliest"), settings.kafka_timeout_s
            )
            check_topic_identity(
                pipeline.name, topic, current, store.stored_topic_ids(conn, pipeline.name, topic)
            )
        except (TopicMissingError, TopicRecreatedError) as exc:
            raise BackfillError(str(exc)) from None
        return cls(
            kafka,
            store.positions(conn, pipeline.name, topic),
            store.committed_span(conn, pipeline.name, topic),
            current,
        )


def plan_chunk(
    settings: Settings, conn: psycopg.Connection, pipeline: pipelines.Pipeline, chunk: OffsetRange, kind: str
) -> PartitionPlan:
    """Validate one chunk exactly as a backfill request of that range would be, now; its PartitionPlan.

    Every way a chunk reaches the job (the backfill DAG's mapped tasks, `eosflow ingest --range`)
    goes through here, so no chunk can skip the rules: a catch-up chunk starts at the stored position
    (or, for a partition never committed, at the log start: a history never starts in the middle),
    a replay re-reads committed offsets only, and the chunk is of the pipeline's own topic.
    """
    if chunk.topic not in pipeline.topics:
        raise BackfillError(
            f"{chunk} is not of pipeline {pipeline.name!r}, which reads {', '.join(pipeline.topics)}; "
            "nothing was run"
        )
    facts = _Facts.read(settings, conn, pipeline, chunk.topic)
    request = BackfillRequest(
        pipeline.name,
        kind,
        (chunk.partition,),
        chunk.start,
        chunk.end,
        chunk_size=max(chunk.span, 1),
        topic=chunk.topic,
    )
    if validate(request, chunk.topic, facts.kafka, facts.positions, facts.committed) != [chunk]:
        raise BackfillError(f"{chunk} does not validate as one chunk of a {kind}; nothing was run")
    if kind == "replay":
        return PartitionPlan(
            chunk,
            first_seen=False,
            topic_id=facts.topic_id,
            replays=store.replays(conn, pipeline.name, chunk.topic, chunk.partition),
        )
    return PartitionPlan(
        chunk, first_seen=facts.positions.get(chunk.partition) is None, topic_id=facts.topic_id
    )


def run(
    settings: Settings,
    request: BackfillRequest,
    run_id: str,
    chunks: list[OffsetRange],
    log: Callable[[str], None] = print,
) -> list[RunSummary]:
    """Run the chunks in order; stop at the first that does not commit."""
    done: list[RunSummary] = []
    for i, chunk in enumerate(chunks, 1):
        log(f"chunk {i}/{len(chunks)}: {request.mode} {chunk}")
        done.append(run_chunk(settings, request.pipeline, run_id, chunk, request.mode, log))
    return done


def run_chunk(
    settings: Settings,
    pipeline_name: str,
    run_id: str,
    chunk: OffsetRange,
    kind: str,
    log: Callable[[str], None] = print,
) -> RunSummary:
    """One backfill chunk: an explicit range, as a catch-up (moves the position) or a replay (does not).

    A new chunk is validated now, against what Kafka and the warehouse say when it runs (a chunk
    whose predecessor has not committed is refused with BackfillError); a retry reuses its persisted
    plan. The commit re-checks what matters under lock (fencing, committed-ness, replay counts).
    """
    if kind not in ("catch-up", "replay"):
        raise ValueError(f"a chunk is a catch-up or a replay, not {kind!r}")
    pipeline = pipelines.load(settings, pipeline_name)
    refuse_backfill(pipeline, kind)
    batch_id = batch_id_for(pipeline.name, run_id, chunk, kind)

    def make_plan(conn: psycopg.Connection, version: int) -> tuple[Plan, str | None]:
        existing = store.load_plan(conn, batch_id)
        if existing is not None:
            return existing
        part = plan_chunk(settings, conn, pipeline, chunk, kind)
        return store.save_plan(conn, Plan(batch_id, pipeline.name, run_id, (part,), kind, version)), None

    return job.execute(settings, pipeline, batch_id, make_plan, log)
