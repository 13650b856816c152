"""The same ingestion job, unchanged, on a Spark standalone cluster reading a three-broker KRaft cluster.

A master and two one-core workers started with pyspark's own `spark-class` (eosflow_dev.stack.spark_cluster),
the lab's three-node Kafka cluster (topic replicated three ways, min.insync.replicas 2), and the stack's
warehouse: `eosflow ingest` with EOSFLOW_SPARK_MASTER=spark://... and the three brokers as bootstrap
servers lands every committed record once, and the invariants hold.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from eosflow_dev.lab.cluster import KraftCluster
from eosflow_dev.produce import events
from eosflow_dev.produce.producer import Delivery, EventProducer, produce_stream
from eosflow_dev.stack.process import port_is_free
from eosflow_dev.stack.spark_cluster import ClusterPorts, SparkCluster

pytestmark = pytest.mark.integration


def _free_run(n: int) -> int:
    """The first of n consecutive free ports (the workers' web UIs take consecutive ports)."""
    for base in range(21000, 40000, 97):
        if all(port_is_free("127.0.0.1", base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no {n} consecutive free ports between 21000 and 40000")


@pytest.fixture
def kafka_cluster(running_stack, tmp_path):
    cluster = KraftCluster(tmp_path / "kafka", running_stack, base_port=19400)
    cluster.start(log=lambda m: None)
    yield cluster
    cluster.stop(log=lambda m: None)


@pytest.fixture
def spark_cluster(running_stack, tmp_path):
    base = _free_run(4)
    ports = ClusterPorts(master=base, master_ui=base + 1, first_worker_ui=base + 2)
    cluster = SparkCluster(running_stack, tmp_path / "spark", ports, workers=2)
    cluster.up(log=lambda m: None)
    yield cluster
    cluster.down(log=lambda m: None)


def test_the_same_job_runs_on_a_spark_cluster_against_three_brokers(case, kafka_cluster, spark_cluster):
    """Slow in its fixtures: a three-broker KRaft cluster and a Spark standalone master and worker are
    started for it, and the job goes through spark-submit."""
    kafka_cluster.create_topic(case.topic, partitions=4, replication=3, min_insync=2)
    settings = dataclasses.replace(case.settings, kafka_bootstrap=kafka_cluster.bootstrap_servers)
    producer = EventProducer(settings.bootstrap_servers, case.topic, Delivery(), seed=601)
    manifest = produce_stream(producer, events.generate(601, 3_000), 601)

    done = subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", case.name],
        env=case.env(
            EOSFLOW_SPARK_MASTER=spark_cluster.master_url,
            EOSFLOW_INLINE_MAX_OFFSETS="0",  # a batch this small would run in the driver's process
            EOSFLOW_KAFKA_BOOTSTRAP_SERVERS=kafka_cluster.bootstrap_servers,
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert "COMMITTED" in done.stdout
    assert sorted(case.event_ids()) == sorted(r.event_id for r in manifest.visible())
    case.settings = settings  # the invariants read the cluster's offsets
    assert case.violations() == []
    # The executors ran in the workers: the master lists the application as finished.
    assert spark_cluster.completed_apps() >= 1
