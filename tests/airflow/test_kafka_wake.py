"""Kafka-woken ingest DAGs, end to end: a real `airflow standalone` (scheduler, triggerer), the real broker
and Postgres. Records produced to a `wake_on_records: true` pipeline's topic wake its ingest DAG through
an AssetWatcher; nobody triggers it and its interval (a day here) never comes; the records land once.

On the suite's shared standalone (tests/airflow/conftest.py `woken`: its pipeline of its own, its triggerer),
which also serves the pipeline of the REST and browser tests: every check below names this pipeline's DAG,
asset, table and groups.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

from eosflow.kafka_admin import admin
from eosflow.sinks.kafka.produce import group_id as sink_group_id
from tests.airflow.conftest import dag_runs, settled
from tests.integration.ingest_case import IngestCase

pytestmark = pytest.mark.integration

WAKE_GROUP = "eosflow.wake.{}"


def _woken_run(server, dag_id: str, known: set[str], timeout: float = 240) -> dict:
    """The first run that is not in `known`, once it has finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [r for r in dag_runs(server, dag_id) if r["dag_run_id"] not in known]
        if new and new[0]["state"] in ("success", "failed"):
            return new[0]
        time.sleep(3)
    raise AssertionError(f"no run of {dag_id} in {timeout}s after the records arrived:\n{server.log_tail()}")


def _wake_events(server, pipeline: IngestCase) -> int:
    return server.asset_events(f"name_pattern=wake.{pipeline.name}&limit=1000")["total_entries"]


def _group_lag(pipeline: IngestCase, group: str) -> dict[int, int]:
    """Per partition: the topic's end (read_committed) minus what `group` committed."""
    bootstrap = pipeline.settings.bootstrap_servers
    asked = [TopicPartition(pipeline.topic, p) for p in range(2)]
    client = admin(bootstrap)  # kept alive until its futures resolve
    future = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, asked)])
    committed = {tp.partition: tp.offset for tp in future[group].result(timeout=30).topic_partitions}
    ends = Consumer({"bootstrap.servers": bootstrap, "group.id": "eosflow.test.ends"})
    try:
        return {
            p: ends.get_watermark_offsets(TopicPartition(pipeline.topic, p), timeout=10, cached=False)[1]
            - committed[p]
            for p in range(2)
        }
    finally:
        ends.close()


def _committed_by(pipeline: IngestCase) -> set[str]:
    """The Airflow runs whose batches committed records of the pipeline (not only empty ranges)."""
    rows = pipeline.query(
        "select distinct p.run_id from eosflow.plans p join eosflow.ledger l using (batch_id) "
        "where p.pipeline = %s and l.end_offset > l.start_offset",
        pipeline.name,
    )
    return {r[0] for r in rows}


def _wait_for_rows(server, pipeline: IngestCase, count: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while len(pipeline.event_ids()) < count:
        assert time.monotonic() < deadline, server.log_tail()
        time.sleep(3)


def test_a_burst_of_records_wakes_the_ingest_dag_once_or_twice_and_lands_every_record_once(woken):
    """A burst of transactional records wakes the ingest DAG (asset-triggered: neither by hand nor by its
    day-long interval), and every record lands once. The wake-up's group skips to the end of the log when
    it fires, so a backlog is a wake-up or two, not one per record (with runs back to back for hours), and
    the wake group is never the Kafka sink's group."""
    server, pipeline = woken
    dag_id = f"eosflow_ingest_{pipeline.name}"
    settled(server, dag_id)
    before = {r["dag_run_id"] for r in dag_runs(server, dag_id)}
    events_before = _wake_events(server, pipeline)
    committed_before = set(pipeline.event_ids())

    manifest = pipeline.produce(3000, seed=812, partitions=2, transactional_id=f"wake-{pipeline.name}")
    run = _woken_run(server, dag_id, before)
    assert run["state"] == "success", server.log_tail()
    assert run["run_type"] == "asset_triggered", run  # neither by hand nor by the (day-long) interval
    _wait_for_rows(server, pipeline, len(committed_before) + len(manifest.visible()))
    settled(server, dag_id)
    time.sleep(15)  # a wake-up per record would keep firing now
    settled(server, dag_id)  # a last wake-up may still be running (records of the burst's tail): it ends

    assert _wake_events(server, pipeline) - events_before <= 3
    rows = pipeline.event_ids()
    assert len(rows) == len(set(rows)) == len(committed_before) + len(manifest.visible())
    assert set(rows) >= {str(r.event_id) for r in manifest.visible()}  # every record, once
    runs = {r["dag_run_id"]: r["run_type"] for r in dag_runs(server, dag_id)}
    assert _committed_by(pipeline) and {runs[r] for r in _committed_by(pipeline)} == {"asset_triggered"}
    assert pipeline.violations() == []

    assert _group_lag(pipeline, WAKE_GROUP.format(pipeline.name)) == {0: 0, 1: 0}
    client = admin(pipeline.settings.bootstrap_servers)  # kept alive until its future resolves
    groups = {g.group_id for g in client.list_consumer_groups().result(timeout=30).valid}
    assert WAKE_GROUP.format(pipeline.name) in groups
    # The pipeline's own group (a Kafka sink's positions; any other sink's lag report, DESIGN "Lag in Kafka's
    # own tools") is written by its commits, never by a wake-up: the ledger's positions, everything read.
    assert sink_group_id(pipeline.name) != WAKE_GROUP.format(pipeline.name)
    assert _group_lag(pipeline, sink_group_id(pipeline.name)) == {0: 0, 1: 0}
