"""Is a pipeline's stream keeping up? What the health-check DAG (eosflow_stream_health) asks.

A stream runs outside Airflow (a service: its loop would hold a worker slot for ever, and a scheduler or
worker restart would kill it), so Airflow looks at what the stream leaves in the ledger: a stream is
unhealthy when records wait in Kafka (lag above zero) and no stream batch committed for `stale_after`.
An idle stream commits nothing and is healthy as long as nothing waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from eosflow.ingest import pipelines, store
from eosflow.ingest.kafka_offsets import partition_offsets
from eosflow.settings import Settings


@dataclass(frozen=True)
class StreamHealth:
    pipeline: str
    lag: int  # records (offsets) in Kafka after the stored positions, all partitions
    last_commit_age_s: float | None  # since the last committed stream batch; None: never
    stale_after_s: float

    @property
    def ok(self) -> bool:
        return judge(self.lag, self.last_commit_age_s, self.stale_after_s) is None

    def line(self) -> str:
        age = "never" if self.last_commit_age_s is None else f"{self.last_commit_age_s:,.0f}s ago"
        found = judge(self.lag, self.last_commit_age_s, self.stale_after_s)
        return f"pipeline {self.pipeline}: lag {self.lag:,}, last stream commit {age}: " + (
            found or "healthy"
        )


def judge(lag: int, last_commit_age_s: float | None, stale_after_s: float) -> str | None:
    """None when healthy, else the one-line reason with the fix."""
    if lag <= 0:
        return None
    if last_commit_age_s is not None and last_commit_age_s <= stale_after_s:
        return None
    since = (
        "has never committed"
        if last_commit_age_s is None
        else f"has not committed for {last_commit_age_s:,.0f}s"
    )
    return (
        f"STALE: {lag:,} records wait and the stream {since} (limit {stale_after_s:,.0f}s); is "
        "`eosflow stream` running? (systemd: systemctl status eosflow-stream@<pipeline>; its log says why)"
    )


def check(
    settings: Settings, pipeline_name: str, stale_after_s: float, now: datetime | None = None
) -> StreamHealth:
    pipeline = pipelines.load(settings, pipeline_name)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        lag = 0
        for topic in pipeline.topics:
            stored = store.positions(conn, pipeline.name, topic)
            for partition, offsets in partition_offsets(
                settings.kafka, topic, pipeline.initial_offset
            ).items():
                position = stored.get(partition)
                lag += max(0, offsets.stable_end - (position if position is not None else offsets.log_start))
        (age,) = conn.execute(
            "select extract(epoch from coalesce(%s, now()) - max(committed_at))::float8 from eosflow.plans "
            "where pipeline = %s and status = 'committed' and run_id like 'stream\\_\\_%%'",
            (now, pipeline.name),
        ).fetchone()
    return StreamHealth(pipeline.name, lag, age, stale_after_s)
