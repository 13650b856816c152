"""The delivery modes are an enum (eosflow.delivery.Delivery), parsed once where a pipeline or a publisher is
declared and compared as members after; what a user reads of one (an error, a log line) and what is written
of it (JSON, a Spark task's pickle) stays the text declared, byte for byte."""

from __future__ import annotations

import json
import pickle

import pytest
import yaml

from eosflow import settings as settings_mod
from eosflow.delivery import Delivery
from eosflow.errors import PipelineConfigError
from eosflow.pipelines import DELIVERY_MODES, _parse
from eosflow.publish.declaration import load_publisher

PIPELINE = {
    "topics": ["orders"],
    "target_table": "raw.orders",
    "columns": [{"name": "id", "type": "bigint", "required": True}],
}
PUBLISHER = {"table": "outbox.orders", "topic": "orders.out", "id": "id"}


def _publisher(tmp_path, **change):
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": {}, "publishers": {"p": PUBLISHER | change}}))
    return load_publisher(settings_mod.load(), "p", path)


@pytest.mark.parametrize("text", ["exactly_once", "at_least_once", "at_most_once"])
def test_a_pipelines_delivery_is_parsed_once_into_a_member(text):
    pipeline = _parse("orders", {**PIPELINE, "delivery": text}, "pipeline orders")
    assert pipeline.delivery is Delivery(text)


def test_a_pipeline_without_delivery_is_exactly_once():
    assert _parse("orders", PIPELINE, "pipeline orders").delivery is Delivery.EXACTLY_ONCE


def test_an_unknown_pipeline_delivery_is_refused_naming_the_modes_as_text():
    with pytest.raises(PipelineConfigError) as refused:
        _parse("orders", {**PIPELINE, "delivery": "twice"}, "pipeline orders")
    assert str(refused.value) == (
        "pipeline orders: delivery 'twice' unknown; one of ['exactly_once', 'at_least_once', 'at_most_once']"
    )


@pytest.mark.parametrize("text", ["exactly_once", "at_least_once"])
def test_a_publishers_delivery_is_parsed_once_into_a_member(tmp_path, text):
    assert _publisher(tmp_path, delivery=text).delivery is Delivery(text)
    assert _publisher(tmp_path).delivery is Delivery.EXACTLY_ONCE


@pytest.mark.parametrize("text", ["at_most_once", "twice"])
def test_a_publisher_refuses_what_it_cannot_deliver_as_before(tmp_path, text):
    with pytest.raises(PipelineConfigError) as refused:
        _publisher(tmp_path, delivery=text)
    assert str(refused.value).endswith(
        f"publisher 'p': delivery {text!r} unknown; exactly_once, or at_least_once (for comparison only)"
    )


def test_what_is_shown_or_written_of_a_mode_is_its_text():
    for mode in Delivery:
        assert str(mode) == f"{mode}" == mode.value and mode == mode.value
        assert json.dumps({"delivery": mode}) == json.dumps({"delivery": mode.value})
        assert pickle.loads(pickle.dumps(mode)) is mode  # a Spark task receives the member
    assert DELIVERY_MODES == ("exactly_once", "at_least_once", "at_most_once")  # the lab's order


def test_the_modes_the_lab_writes_into_its_pipelines_files_are_text():
    """The lab declares each run's delivery from DELIVERY_MODES into YAML, which refuses an enum member
    (yaml.safe_dump raises RepresenterError): the tuple is the modes' text, each a Delivery's value."""
    assert all(type(mode) is str for mode in DELIVERY_MODES)
    assert yaml.safe_load(yaml.safe_dump({"delivery": list(DELIVERY_MODES)})) == {
        "delivery": [Delivery(mode).value for mode in DELIVERY_MODES]
    }
