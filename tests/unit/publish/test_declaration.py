"""Publishers in the pipelines file: what is refused before anything runs, and what it says."""

from __future__ import annotations

import pytest
import yaml

from eosflow import settings as settings_mod
from eosflow.pipelines import PipelineConfigError
from eosflow.publish.declaration import load_publisher, load_publishers
from eosflow.publish.position import Position
from eosflow.publish.row_format import RowFormat

BASE = {"table": "outbox.orders", "topic": "orders.out", "id": "id", "key": "customer_id"}


def _write(tmp_path, publishers) -> object:
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": {}, "publishers": publishers}))
    return path


def test_a_publisher_loads_with_its_defaults(tmp_path):
    p = load_publisher(settings_mod.load(), "orders_out", _write(tmp_path, {"orders_out": BASE}))
    assert (p.table, p.topic, p.id_column, p.key_column, p.batch_rows) == (
        "outbox.orders",
        "orders.out",
        "id",
        "customer_id",
        1_000,
    )
    assert p.offsets_topic == "eosflow.publish.offsets.orders_out"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"table": "orders"}, "table 'orders' must be schema.table"),
        ({"id": None}, "id None must be a column name"),
        ({"topic": "a topic"}, "must be a Kafka topic name"),
        ({"batch_rows": 0}, "batch_rows must be a whole number >= 1"),
        ({"batch_seconds": 0}, "batch_seconds must be a number > 0"),
        ({"since": "yesterday"}, r"unknown setting\(s\) \['since'\]"),
    ],
)
def test_a_wrong_publisher_is_refused_saying_what_to_change(tmp_path, change, message):
    spec = {k: v for k, v in (BASE | change).items() if v is not None}
    with pytest.raises(PipelineConfigError, match=message):
        load_publishers(settings_mod.load(), _write(tmp_path, {"p": spec}))


def test_two_publishers_writing_one_topic_are_refused(tmp_path):
    path = _write(tmp_path, {"a": BASE, "b": BASE | {"table": "outbox.other"}})
    with pytest.raises(PipelineConfigError, match="'a' and 'b' both write orders.out"):
        load_publishers(settings_mod.load(), path)


def test_an_unknown_publisher_names_the_declared_ones(tmp_path):
    with pytest.raises(PipelineConfigError, match=r"unknown publisher 'x'.*\['orders_out'\]"):
        load_publisher(settings_mod.load(), "x", _write(tmp_path, {"orders_out": BASE}))


def test_a_position_survives_its_json_form():
    assert Position.from_json(Position(2**40, "ord-7").to_json()) == Position(2**40, "ord-7")


@pytest.mark.parametrize("text", ["json", "avro", "protobuf"])
def test_a_publishers_format_is_parsed_once_into_a_member_shown_as_its_text(tmp_path, text):
    p = load_publisher(settings_mod.load(), "p", _write(tmp_path, {"p": BASE | {"format": text}}))
    assert p.format is RowFormat(text) and f"writes {p.format}" == f"writes {text}"
    assert load_publisher(settings_mod.load(), "p", _write(tmp_path, {"p": BASE})).format is RowFormat.JSON


def test_an_unknown_publisher_format_is_refused_as_before(tmp_path):
    with pytest.raises(PipelineConfigError) as refused:
        load_publishers(settings_mod.load(), _write(tmp_path, {"p": BASE | {"format": "xml"}}))
    message = "publisher 'p': format 'xml' unknown; json (default), avro or protobuf"
    assert str(refused.value).endswith(message)
