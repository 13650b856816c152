"""The dbt project on a declared pipeline that is not orders: the invariants hold on its own columns,
I6 checks its declared business key (and catches a duplicate of it), and without one I6 is shown as
not checked rather than silently passing."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from eosflow import verify
from eosflow.kafka_admin import ensure_topic
from tests.integration.ingest_case import IngestCase

pytestmark = pytest.mark.integration

COLUMNS = [
    {"name": "sku", "type": "text", "required": True},
    {"name": "qty", "type": "integer", "required": True, "min": 0},
]


def _ingest(settings, tmp_path, monkeypatch, business_key: str | None, values: list[bytes]) -> IngestCase:
    case = IngestCase(settings, tmp_path / "pipelines.yml")
    case.write_config(columns=COLUMNS, business_key=business_key)
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(case.config_path))
    ensure_topic(settings.bootstrap_servers, case.topic, 2, log=lambda m: None)
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "enable.idempotence": True})
    for i, v in enumerate(values):
        producer.produce(case.topic, key=b"k", value=v, partition=i % 2)
    assert producer.flush(30) == 0
    assert case.ingest().outcome == "committed"
    return case


def test_i6_checks_the_declared_business_key_and_catches_a_duplicate(running_stack, tmp_path, monkeypatch):
    values = [b'{"sku": "a", "qty": 1}', b'{"sku": "b", "qty": 2}', b'{"sku": "a", "qty": 3}', b"bad"]
    case = _ingest(running_stack, tmp_path, monkeypatch, "sku", values)

    result = verify.verify_pipeline(running_stack, case.name)

    assert not result.ok
    assert [c.name for c in result.failed] == ["no_duplicate_business_keys"], result.table()
    (row,) = result.check("no_duplicate_business_keys").rows
    assert (row["business_key"], row["copies"]) == ("a", 2)
    assert all(c.status == "pass" for c in result.checks if c.invariant not in (None, "I6")), result.table()
    assert "order_events" not in result.output  # the orders marts are not built for this pipeline


def test_without_a_business_key_i6_is_shown_as_not_checked(running_stack, tmp_path, monkeypatch):
    case = _ingest(running_stack, tmp_path, monkeypatch, None, [b'{"sku": "a", "qty": 1}'] * 2)

    result = verify.verify_pipeline(running_stack, case.name)

    assert result.ok, result.table()
    i6 = result.check("no_duplicate_business_keys")
    assert i6.status == "not checked" and "declares no business_key" in i6.describe()
    assert {c.invariant for c in result.checks if c.status == "pass"} >= {"I1", "I2", "I3", "I4", "I5"}
