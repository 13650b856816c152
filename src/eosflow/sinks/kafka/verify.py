"""`eosflow verify` for a Kafka sink: every source record read appears exactly once downstream.

A Kafka sink has no table for dbt to check, so the check reads Kafka itself, read_committed, as a
downstream consumer would: the source records in the ledger's committed ranges on one side, and on
the other every record of the output and dead-letter topics, each naming its source record in its
`eosflow-source-*` headers. A source record missing is a loss, one found twice a duplicate, and a
record that names no committed source record is something that should not be there.

Retention deletes source records a sink produced long ago: a record naming an offset below its
partition's log start is checked against the ledger's committed ranges alone (it must lie in one), and
the verdict says how many were checked that way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import psycopg

from eosflow.rows import one_row
from eosflow.settings import Settings
from eosflow.sinks.kafka.output import output_of
from eosflow.sinks.kafka.produce import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
from eosflow.sinks.protocol import Pipeline
from eosflow.sources.kafka.read_back import partitions_of, read_to_end

Coordinates = tuple[str, int, int]  # (source topic, partition, offset)
SHOWN = 5


@dataclass(frozen=True)
class Finding:
    name: str
    ok: bool
    detail: str

    def describe(self) -> str:
        return f"{self.name:<46} {'ok' if self.ok else 'FAILED'}  {self.detail}"


@dataclass(frozen=True)
class KafkaVerifyResult:
    """The same shape as dbt_build.VerifyResult, so the CLI and the DAG's verify task print either."""

    pipeline: str
    checks: tuple[Finding, ...]
    returncode: int = 0

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.checks)

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.checks if not f.ok]

    def check_rows(self) -> list[tuple[str, str | None, str, int, str, str | None]]:
        return [
            (f.name, None, "pass" if f.ok else "fail", 0 if f.ok else 1, "[]", f.detail) for f in self.checks
        ]

    def table(self) -> str:
        lines = [f"Kafka verify of pipeline {self.pipeline}: {'ok' if self.ok else 'FAILED'}"]
        return "\n".join(lines + [f"  {f.describe()}" for f in self.checks])


def verify_kafka_sink(settings: Settings, pipeline: Pipeline) -> KafkaVerifyResult:
    sink = output_of(pipeline)
    ranges, written, rejected = committed(settings, pipeline)
    source = set(_source_records(settings.kafka, ranges))
    output = Counter(_named_sources(settings.kafka, sink.output_topic))
    dead = Counter(_named_sources(settings.kafka, sink.dead_letter_topic))
    found = output + dead
    lost = sorted(source - found.keys())
    twice = sorted(k for k, n in found.items() if n > 1)
    log_start = _log_starts(settings.kafka, {t for t, *_ in ranges})
    expired = {k for k in found if k not in source and _expired(k, ranges, log_start)}
    foreign = sorted(k for k in found if k not in source and k not in expired)
    checks = (
        Finding(
            "every source record read appears",
            not lost,
            f"{len(source):,} source records in {len(ranges)} committed ranges"
            + (f"; {len(lost):,} missing, e.g. {_show(lost)}" if lost else "")
            + (
                f"; {len(expired):,} more below the log start (retention deleted their source records): "
                "checked against the committed ranges only"
                if expired
                else ""
            ),
        ),
        *once_and_nothing_else(twice, foreign),
        Finding(
            "the ledger's counts match the topics",
            (written, rejected) == (sum(output.values()), sum(dead.values())),
            f"ledger {written:,} written + {rejected:,} rejected; {sink.output_topic} has "
            f"{sum(output.values()):,}, {sink.dead_letter_topic} {sum(dead.values()):,}",
        ),
    )
    return KafkaVerifyResult(pipeline.name, checks)


def committed(settings: Settings, pipeline: Pipeline) -> tuple[list[tuple], int, int]:
    """The pipeline's committed data ranges, and the rows the ledger says they wrote and rejected."""
    with psycopg.connect(settings.warehouse_dsn) as conn:
        ranges = conn.execute(
            "select topic, partition, start_offset, end_offset from eosflow.ledger "
            "where pipeline = %s and kind = 'data' and end_offset > start_offset order by 1, 2, 3",
            (pipeline.name,),
        ).fetchall()
        written, rejected = one_row(
            conn.execute(
                "select coalesce(sum(rows_written), 0), coalesce(sum(rows_rejected), 0) from eosflow.ledger "
                "where pipeline = %s and kind = 'data'",
                (pipeline.name,),
            )
        )
    return ranges, written, rejected


def once_and_nothing_else(twice: list[Coordinates], foreign: list[Coordinates]) -> list[Finding]:
    """What every Kafka sink's output must be, whatever else it keeps: each committed source record in it
    at most once, and no record that names none."""
    return [
        Finding(
            "no source record appears twice",
            not twice,
            f"{len(twice):,} appear more than once, e.g. {_show(twice)}" if twice else "",
        ),
        Finding(
            "nothing else in the output",
            not foreign,
            f"{len(foreign):,} records name no committed source record, e.g. {_show(foreign)}"
            if foreign
            else "",
        ),
    ]


def _show(keys: list[Coordinates]) -> str:
    return ", ".join(f"{t}[{p}]@{o}" for t, p, o in keys[:SHOWN])


def _source_records(
    kafka: Mapping[str, str], ranges: Iterable[tuple[str, int, int, int]]
) -> Iterator[Coordinates]:
    """The offsets of the records a read_committed reader gets in each range (aborted ones are none)."""
    ranges = list(ranges)
    by_partition: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for topic, partition, start, end in ranges:
        by_partition.setdefault((topic, partition), []).append((start, end))
    # One consumer for all partitions, each read from its first range's start to its last range's end
    # (the ledger's ranges of a partition are contiguous: I2), every offset then kept if inside a range.
    starts = [(t, p, min(s for s, _ in spans)) for (t, p), spans in by_partition.items()]
    ends = {key: max(e for _, e in spans) for key, spans in by_partition.items()}
    for m in read_to_end(kafka, starts, ends):
        spans = by_partition[(m.topic(), m.partition())]
        if any(s <= m.offset() < e for s, e in spans):
            yield m.topic(), m.partition(), m.offset()


def _log_starts(kafka: Mapping[str, str], topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """Each source partition's first offset still in the log (retention moves it)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(dict(kafka))
    request = {TopicPartition(t, p): OffsetSpec.earliest() for t in topics for p in partitions_of(kafka, t)}
    if not request:
        return {}
    futures = admin.list_offsets(request, request_timeout=30)
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}


def _expired(key: Coordinates, ranges: list[tuple[str, int, int, int]], log_start: dict) -> bool:
    """A record naming an offset retention deleted since, inside a committed range."""
    topic, partition, offset = key
    return offset < log_start.get((topic, partition), 0) and any(
        t == topic and p == partition and s <= offset < e for t, p, s, e in ranges
    )


def _named_sources(kafka: Mapping[str, str], topic: str) -> Iterator[Coordinates]:
    """The source record each committed record of `topic` names in its headers."""
    for m in read_to_end(kafka, [(topic, p, -2) for p in partitions_of(kafka, topic)]):
        h = dict(m.headers() or [])
        try:
            yield h[SOURCE_TOPIC].decode(), int(h[SOURCE_PARTITION]), int(h[SOURCE_OFFSET])
        except (KeyError, ValueError):
            yield f"(no source headers: {topic})", m.partition(), m.offset()
