"""The Prometheus metrics: a collector that reads one snapshot per scrape (observe.state)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from eosflow.observe.state import PipelineState, now


class PipelineCollector(Collector):
    def __init__(self, states: Callable[[], list[PipelineState]]) -> None:
        self.states = states

    def collect(self) -> Iterator:
        lag = GaugeMetricFamily(
            "eosflow_lag_records",
            "Offsets in Kafka after the stored position",
            labels=["pipeline", "topic", "partition"],
        )
        lag_s = GaugeMetricFamily(
            "eosflow_lag_seconds",
            "Age of the oldest unread record (partitions with lag)",
            labels=["pipeline", "topic", "partition"],
        )
        position = GaugeMetricFamily(
            "eosflow_position",
            "The next offset to read, as stored",
            labels=["pipeline", "topic", "partition"],
        )
        read = CounterMetricFamily("eosflow_records_read", "Records committed as read", labels=["pipeline"])
        written = CounterMetricFamily(
            "eosflow_rows_written", "Rows committed to the output", labels=["pipeline"]
        )
        rejected = CounterMetricFamily(
            "eosflow_rows_rejected", "Rows committed as rejected", labels=["pipeline"]
        )
        age = GaugeMetricFamily(
            "eosflow_last_commit_age_seconds", "Seconds since the pipeline's last commit", labels=["pipeline"]
        )
        checks = GaugeMetricFamily(
            "eosflow_check_passing",
            "1 if the check passed in the latest verification, else 0",
            labels=["pipeline", "check", "invariant"],
        )
        up = GaugeMetricFamily(
            "eosflow_kafka_reachable", "1 if Kafka answered for the pipeline", labels=["pipeline"]
        )
        stale = GaugeMetricFamily(
            "eosflow_stale",
            "1 if records wait and nothing committed within the pipeline's limit (eosflow_health's rule)",
            labels=["pipeline"],
        )
        current = now()
        for s in self.states():
            name = s.pipeline.name
            for p in s.partitions:
                labels = [name, p.topic, str(p.partition)]
                if p.lag is not None:
                    lag.add_metric(labels, p.lag)
                if p.position is not None:
                    position.add_metric(labels, p.position)
                if (p.topic, p.partition) in s.lag_seconds:
                    lag_s.add_metric(labels, s.lag_seconds[(p.topic, p.partition)])
            read.add_metric([name], s.totals.get("read", 0))
            written.add_metric([name], s.totals.get("written", 0))
            rejected.add_metric([name], s.totals.get("rejected", 0))
            if s.last_commit is not None:
                age.add_metric([name], (current - s.last_commit).total_seconds())
            for c in s.checks:
                passing = c["status"] in ("pass", "success", "skipped")
                checks.add_metric([name, c["name"], c["invariant"] or ""], 1.0 if passing else 0.0)
            up.add_metric([name], 0.0 if s.kafka_error else 1.0)
            if (health := s.health) is not None:
                stale.add_metric([name], 0.0 if health.ok else 1.0)
        yield from (lag, lag_s, position, read, written, rejected, age, checks, up, stale)


def exposition(states: Callable[[], list[PipelineState]]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(states))
    return generate_latest(registry)
