"""Backfills against the real Kafka and warehouse: resolve and validate a request, then run its chunks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime

import psycopg

from eosflow.ingest import job, pipelines, store
from eosflow.ingest.backfill import BackfillError, BackfillRequest, validate
from eosflow.ingest.kafka_offsets import TopicMissingError, offsets_for_time, partition_offsets
from eosflow.ingest.pipelines import InitialOffset
from eosflow.ingest.ranges import OffsetRange
from eosflow.ingest.summary import RunSummary
from eosflow.settings import Settings
from eosflow.warehouse.migrate import migrate


def _epoch_ms(text: str, name: str) -> int:
    try:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise BackfillError(f"{name} {text!r} is not an ISO-8601 time like 2026-01-01T00:00:00Z") from None
    if stamp.tzinfo is None:
        raise BackfillError(f"{name} {text!r} has no time zone; add Z or +01:00")
    return int(stamp.timestamp() * 1000)


def resolve(
    settings: Settings, request: BackfillRequest, from_time: str | None = None, to_time: str | None = None
) -> list[OffsetRange]:
    """The validated chunks of a request, in the order they must commit. Raises BackfillError."""
    if (from_time or to_time) and (request.from_offset is not None or request.to_offset is not None):
        raise BackfillError("give offsets or times, not both")
    try:
        pipeline = pipelines.load(settings, request.pipeline)
        kafka = partition_offsets(settings.bootstrap_servers, pipeline.topic, InitialOffset("earliest"))
    except (pipelines.PipelineConfigError, TopicMissingError) as exc:
        raise BackfillError(str(exc)) from None
    migrate(settings.warehouse_dsn, log=lambda m: None)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        positions = store.positions(conn, pipeline.name, pipeline.topic)
        committed = store.committed_span(conn, pipeline.name, pipeline.topic)
    if not (from_time or to_time):
        return validate(request, pipeline.topic, kafka, positions, committed)

    # Times map to different offsets in each partition: validate partition by partition.
    chosen = request.partitions if request.partitions is not None else tuple(sorted(kafka))
    stable = {p: o.stable_end for p, o in kafka.items()}
    known = [p for p in chosen if p in kafka]
    starts = (
        offsets_for_time(
            settings.bootstrap_servers, pipeline.topic, known, _epoch_ms(from_time, "from time"), stable
        )
        if from_time
        else {}
    )
    ends = (
        offsets_for_time(
            settings.bootstrap_servers, pipeline.topic, known, _epoch_ms(to_time, "to time"), stable
        )
        if to_time
        else {}
    )
    if from_time and to_time and _epoch_ms(to_time, "to time") < _epoch_ms(from_time, "from time"):
        raise BackfillError(f"the range ends before it starts: to time {to_time} < from time {from_time}")
    chunks: list[OffsetRange] = []
    problems: list[str] = []
    for p in chosen:
        one = dataclasses.replace(request, partitions=(p,), from_offset=starts.get(p), to_offset=ends.get(p))
        try:
            chunks += validate(one, pipeline.topic, kafka, positions, committed)
        except BackfillError as exc:
            problems.append(str(exc).split(": ", 1)[-1])
    if problems:
        raise BackfillError(
            f"backfill of {request.pipeline} refused, nothing was run: " + "; ".join(problems)
        )
    return chunks


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
        done.append(job.run_chunk(settings, request.pipeline, run_id, chunk, request.mode, log))
    return done
