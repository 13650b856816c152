"""Spark's Kafka batch source, with the connector jars the stack fetched, honours read_committed.

Maven Central has no Spark 4.3.0 artifacts, so the 4.2.0 connector runs on pyspark 4.3.0's JVM;
this test is what tells us that pairing still works.
"""

from __future__ import annotations

import pytest

from tests.aborted import produce_with_aborts

pytestmark = pytest.mark.integration


def test_spark_reads_exactly_the_committed_records(running_stack, spark, topic_name):
    s = running_stack
    manifest = produce_with_aborts(s.bootstrap_servers, topic_name, 3, 1_200, seed=3)

    # The session every test shares (made as the job makes it, with the stack's jars): a session of
    # this test's own would be the shared one anyway (getOrCreate), and stopping it broke later tests.
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", s.bootstrap_servers)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .selectExpr("partition", "offset", "get_json_object(cast(value as string), '$.event_id') id")
        .collect()
    )
    assert sorted((r.partition, r.offset, r.id) for r in rows) == sorted(
        (r.partition, r.offset, r.event_id) for r in manifest.visible()
    )
