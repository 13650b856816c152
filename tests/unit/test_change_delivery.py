"""Which sinks keep a change stream's state under the comparison delivery modes (docs/DESIGN.md, "Delivery
modes"): the warehouse sink applies the state in the output's transaction, so it takes all three; the Kafka
and Iceberg sinks keep state exactly_once alone and say so."""

from __future__ import annotations

import pytest

from eosflow.errors import PipelineConfigError
from eosflow.pipelines import _parse

CHANGES = {
    "topics": ["shop.public.customers"],
    "changes": "debezium",
    "primary_key": ["id"],
    "columns": [{"name": "id", "type": "bigint", "required": True}, {"name": "email", "type": "text"}],
}
SINKS = {
    "warehouse": {"target_table": "replica.customers_log", "state_table": "replica.customers"},
    "kafka": {"sink": "kafka", "output_topic": "replica.customers"},
    "iceberg": {"sink": "iceberg", "table": "replica.customers"},
}


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once", "at_most_once"])
def test_the_warehouse_sink_keeps_a_change_streams_state_under_every_delivery_mode(delivery) -> None:
    pipeline = _parse("customers", {**CHANGES, **SINKS["warehouse"], "delivery": delivery}, "pipeline c")
    assert pipeline.delivery == delivery and pipeline.sink.state_table == "replica.customers"


@pytest.mark.parametrize(
    ("sink", "delivery"),
    [("kafka", "at_least_once"), ("iceberg", "at_least_once"), ("iceberg", "at_most_once")],
)
def test_a_sink_that_keeps_state_exactly_once_only_refuses_a_comparison_mode_naming_exactly_once(
    sink, delivery
) -> None:
    with pytest.raises(PipelineConfigError, match=f"sink: {sink} keeps .* exactly_once only.*{delivery}"):
        _parse("customers", {**CHANGES, **SINKS[sink], "delivery": delivery}, "pipeline c")
