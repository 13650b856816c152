"""A small plan read in the run's own process (eosflow.sources.kafka.inline) against the same plan
through Spark's tasks: the same rows, the same rejected rows, the same ledger, and no JVM started."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from confluent_kafka import Producer

from eosflow.runners import job
from tests.integration.ingest_case import IngestCase

pytestmark = pytest.mark.integration

_BAD = [b"not json", b"[1, 2]", b'{"event_id": "x"}', None, b"\xff\xfe"]


def _rows(case: IngestCase, table: str) -> list[tuple]:
    return case.query(
        f"select kafka_partition, kafka_offset, kafka_timestamp, kafka_key, kafka_headers::text, event_id, "
        f"event_type, event_time, order_id, customer_id, amount_cents, currency, schema_version "
        f"from {table} order by 1, 2"
    )


def _ledger_counts(case: IngestCase, pipeline: str) -> list[tuple]:
    return case.query(
        "select partition, start_offset, end_offset, records_read, rows_written, rows_rejected "
        "from eosflow.ledger where pipeline = %s order by 1, 2",
        pipeline,
    )


def test_a_small_plan_read_in_process_lands_exactly_what_spark_lands(case, tmp_path):
    case.produce(300, seed=23, partitions=3)
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    for i, value in enumerate(_BAD):
        producer.produce(
            case.topic, key=f"bad-{i}".encode(), value=value, partition=i % 3, headers=[("h", b"1")]
        )
    producer.flush(10)

    # The same topic, two pipelines: one inline (the default for a small plan), one through Spark.
    spark_case = IngestCase(case.settings, tmp_path / "spark.yml", spec={"topics": [case.topic]})
    both = {"pipelines": {case.name: case.spec, spark_case.name: spark_case.spec}}
    case.config_path.write_text(yaml.safe_dump(both))
    inline = job.run(case.settings, case.name, log=lambda m: None)
    spark_settings = dataclasses.replace(case.settings, inline_max_offsets=0)
    through_spark = job.run(spark_settings, spark_case.name, log=lambda m: None)

    assert inline.outcome == through_spark.outcome == "committed"
    assert "spark start" not in inline.phases and "spark start" in through_spark.phases
    assert inline.records_read == through_spark.records_read == 305
    assert _rows(case, case.table) == _rows(case, spark_case.table)
    assert len(_rows(case, case.table)) == 300
    assert case.rejected() == spark_case.rejected()
    assert [r[2] for r in case.rejected()] == [r[2] for r in spark_case.rejected()] and len(
        case.rejected()
    ) == 5
    assert _ledger_counts(case, case.name) == _ledger_counts(case, spark_case.name)
    assert case.violations() == [] and spark_case.violations() == []


def test_a_plan_past_the_limit_goes_through_spark(case):
    case.produce(40, seed=29, partitions=2)
    summary = job.run(
        dataclasses.replace(case.settings, inline_max_offsets=39), case.name, log=lambda m: None
    )
    assert summary.outcome == "committed" and summary.records_read == 40
    assert "spark start" in summary.phases
