"""What a pipeline looks like right now, for people and for Prometheus: the Airflow view
(plugins/eosflow_airflow/view.py) and the metrics (observe/metrics.py) read the same snapshot.

Everything from the warehouse is read through the read-only role (Settings.reader_dsn), never the
pipeline's owner role; Kafka is asked for its end offsets and, for a partition with lag, the timestamp
of the oldest unread record (the lag in time).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg
from psycopg.rows import dict_row

from eosflow.observe.health import (
    STREAM_RUNS,
    PipelineHealth,
    PublisherHealth,
    publisher_health,
    publisher_stale_limit,
    stale_limits,
)
from eosflow.pipelines import Pipeline, PipelineMode
from eosflow.publish.declaration import Publisher
from eosflow.settings import Settings
from eosflow.sources.kafka.offsets import partition_offsets

RECENT_RANGES = 100
_POSITIONS = """
    select p.topic, p.partition, p.next_offset,
           (select max(committed_at) from eosflow.ledger l
             where l.pipeline = p.pipeline and l.topic = p.topic and l.partition = p.partition) as last_commit
      from eosflow.positions p
     where p.pipeline = %s
"""
_LATEST_CHECKS = """
    select name, invariant, status, failures, rows, message, checked_at
      from eosflow.checks
     where pipeline = %s and checked_at = (select max(checked_at) from eosflow.checks where pipeline = %s)
     order by invariant nulls last, name
"""
# Per hour of the last day: records committed, and the largest lag a plan saw (records left after it).
_HOURLY = """
    with hours as (
        select generate_series(date_trunc('hour', now()) - interval '23 hours', date_trunc('hour', now()),
                               interval '1 hour') as hour
    ), committed as (
        select date_trunc('hour', committed_at) as hour, sum(records_read) as records
          from eosflow.ledger
         where pipeline = %s and kind = 'data' and committed_at > now() - interval '1 day'
         group by 1
    ), lag as (
        select date_trunc('hour', created_at) as hour,
               max((select coalesce(sum((x->>'lag_after')::bigint), 0)
                      from jsonb_array_elements(partitions) x)) as lag
          from eosflow.plans
         where pipeline = %s and created_at > now() - interval '1 day'
         group by 1
    )
    select hours.hour, coalesce(committed.records, 0) as records, lag.lag
      from hours left join committed using (hour) left join lag using (hour)
     order by hours.hour
"""
_TOTALS = """
    select coalesce(sum(records_read), 0) as read, coalesce(sum(rows_written), 0) as written,
           coalesce(sum(rows_rejected), 0) as rejected
      from eosflow.ledger
     where pipeline = %s and kind = 'data'
"""


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    position: int | None  # the next offset to read (None: never committed)
    end: int | None  # Kafka's last stable offset (None: Kafka did not answer)
    last_commit: datetime | None

    @property
    def lag(self) -> int | None:
        if self.end is None:
            return None
        return max(0, self.end - (self.position or 0))


@dataclass(frozen=True)
class PipelineState:
    pipeline: Pipeline
    partitions: list[PartitionState]
    lag_seconds: dict[tuple[str, int], float]  # age of the oldest unread record, partitions with lag
    ranges: list[dict]  # the ledger's latest ranges, newest first
    checks: list[dict]  # the latest verification, one row per check
    checked_at: datetime | None
    plans: list[dict]  # plans not committed: in flight, or fenced/abandoned
    hourly: list[dict]  # the last day: hour, records committed, max lag planned
    totals: dict[str, int] = field(default_factory=dict)  # records read, written, rejected (all time)
    kafka_error: str | None = None
    stream_commit: datetime | None = None  # the last commit of an `eosflow stream` batch
    stale_after_s: float | None = None  # the health rule's limit (health.stale_limits); None: not judged

    @property
    def health(self) -> PipelineHealth | None:
        """eosflow_health's verdict on this snapshot: stale when records wait and nothing that counts
        (a stream's own batches, any commit for a batch pipeline) committed within the limit."""
        if self.stale_after_s is None or self.kafka_error:
            return None  # no limit given, or no lag known
        counted = self.stream_commit if self.pipeline.mode == PipelineMode.STREAM else self.last_commit
        age = None if counted is None else max(0.0, (now() - counted).total_seconds())
        return PipelineHealth(self.pipeline.name, self.lag, age, self.stale_after_s, self.pipeline.mode)

    @property
    def last_commit(self) -> datetime | None:
        times = [p.last_commit for p in self.partitions if p.last_commit]
        return max(times) if times else None

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def checks_ok(self) -> bool | None:
        if not self.checks:
            return None
        return all(c["status"] in ("pass", "success", "skipped") for c in self.checks)


def snapshot(
    settings: Settings, pipelines: list[Pipeline], partition: int | None = None, with_kafka: bool = True
) -> list[PipelineState]:
    with psycopg.connect(settings.reader_dsn, row_factory=dict_row, connect_timeout=10) as conn:
        return [_one(conn, settings, p, partition, with_kafka) for p in pipelines]


def _one(
    conn, settings: Settings, pipeline: Pipeline, partition: int | None, with_kafka: bool
) -> PipelineState:
    name = pipeline.name
    stored = {(r["topic"], r["partition"]): r for r in conn.execute(_POSITIONS, (name,))}
    ends: dict[tuple[str, int], int] = {}
    kafka_error = None
    if with_kafka:
        try:
            for topic in pipeline.topics:
                for p, offsets in partition_offsets(
                    settings.kafka, topic, pipeline.initial_offset, 10
                ).items():
                    ends[(topic, p)] = offsets.stable_end
        except Exception as exc:  # noqa: BLE001 - the view still shows the warehouse's side
            kafka_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    keys = sorted(set(stored) | set(ends))
    states = [
        PartitionState(
            t,
            p,
            (stored.get((t, p)) or {}).get("next_offset"),
            ends.get((t, p)),
            (stored.get((t, p)) or {}).get("last_commit"),
        )
        for t, p in keys
    ]
    lagging = {(s.topic, s.partition): s.position or 0 for s in states if s.lag}
    lag_seconds = _oldest_unread_age(settings, lagging) if with_kafka and lagging else {}
    params: list[str | int]
    where, params = "pipeline = %s", [name]
    if partition is not None:
        where, params = where + " and partition = %s", [name, partition]
    ranges = conn.execute(
        f"select topic, partition, start_offset, end_offset, kind, batch_id, records_read, rows_written, "
        f"rows_rejected, committed_at from eosflow.ledger where {where} "
        f"order by committed_at desc, id desc limit {RECENT_RANGES}",
        params,
    ).fetchall()
    checks = conn.execute(_LATEST_CHECKS, (name, name)).fetchall()
    plans = conn.execute(
        "select batch_id, run_id, kind, created_at, "
        "created_at > coalesce((select max(committed_at) from eosflow.plans c where c.pipeline = p.pipeline "
        "and c.status = 'committed'), '-infinity') as in_flight "
        "from eosflow.plans p where pipeline = %s and status = 'planned' order by created_at desc limit 20",
        (name,),
    ).fetchall()
    hourly = conn.execute(_HOURLY, (name, name)).fetchall()
    totals = conn.execute(_TOTALS, (name,)).fetchone()
    stream_commit = conn.execute(
        "select max(committed_at) as at from eosflow.plans where pipeline = %s and status = 'committed' "
        "and run_id like %s",
        (name, STREAM_RUNS),
    ).fetchone()["at"]
    for c in checks:
        c["rows"] = c["rows"] if isinstance(c["rows"], list) else json.loads(c["rows"] or "[]")
    return PipelineState(
        pipeline,
        states,
        lag_seconds,
        ranges,
        checks,
        checks[0]["checked_at"] if checks else None,
        plans,
        hourly,
        {k: int(v) for k, v in totals.items()},
        kafka_error,
        stream_commit,
        stale_limits({name: pipeline})[name],
    )


def _oldest_unread_age(
    settings: Settings, positions: dict[tuple[str, int], int]
) -> dict[tuple[str, int], float]:
    """Seconds since the Kafka timestamp of the first committed record at or after each position."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {**settings.kafka, "group.id": "eosflow.observe", "enable.auto.commit": False,
         "isolation.level": "read_committed"}
    )  # fmt: skip
    found: dict[tuple[str, int], float] = {}
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        deadline = time.monotonic() + 3.0
        while len(found) < len(positions) and time.monotonic() < deadline:
            for m in consumer.consume(len(positions), timeout=0.2):
                topic, partition = m.topic(), m.partition()
                if topic is None or partition is None:
                    continue  # a client-level error names no partition
                key = (topic, partition)
                if m.error() is None and key not in found:
                    found[key] = max(0.0, time.time() - m.timestamp()[1] / 1000)
    finally:
        consumer.close()
    return found


@dataclass(frozen=True)
class PublisherState:
    """A publisher as the view shows it: its declaration, and its health as the reader can judge it."""

    publisher: Publisher
    health: PublisherHealth | None
    error: str | None = None  # why it could not be looked at (Kafka or Postgres out of reach)


def publisher_snapshot(settings: Settings, publishers: list[Publisher]) -> list[PublisherState]:
    """Each publisher's position, waiting rows and what holds them, read as the read-only role."""
    found = []
    with psycopg.connect(settings.reader_dsn, autocommit=True, connect_timeout=10) as conn:
        for p in publishers:
            try:
                found.append(
                    PublisherState(p, publisher_health(conn, settings.kafka, p, publisher_stale_limit()))
                )
            except Exception as exc:  # noqa: BLE001 - one publisher's trouble never hides the others
                first = str(exc).splitlines()[0] if str(exc) else ""
                found.append(PublisherState(p, None, f"{type(exc).__name__}: {first}"))
    return found


def now() -> datetime:
    return datetime.now(UTC)
