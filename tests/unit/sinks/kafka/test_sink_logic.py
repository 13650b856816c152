"""The Kafka sink's pure parts: the decision after fencing, the record encoding, the declaration."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
import yaml

from eosflow import settings as settings_mod
from eosflow.ledger.mirror import FENCED
from eosflow.ledger.positions import ALREADY_COMMITTED
from eosflow.ledger.ranges import OffsetRange, PartitionPlan
from eosflow.pipelines import PipelineConfigError, load_all
from eosflow.sinks.kafka.produce import commit_metadata, decide, json_value, output_key

PART = PartitionPlan(OffsetRange("t", 0, 10, 20), first_seen=False)
FIRST = PartitionPlan(OffsetRange("t", 0, 0, 20), first_seen=True)
META = commit_metadata("b1", 10, 9, 1)


def test_the_planned_start_means_go_on():
    assert decide(PART, "b1", "g", 10, commit_metadata("b0", 5, 5, 0)) == (None, "")
    assert decide(FIRST, "b1", "g", None, None) == (None, "")


def test_the_planned_end_is_done_only_when_this_batch_committed_it():
    assert decide(PART, "b1", "g", 20, META)[0] == ALREADY_COMMITTED
    # Another batch planned from the same start, committed first, to the same end: fenced, not done.
    outcome, why = decide(PART, "b2", "g", 20, META)
    assert outcome == FENCED and "planned from offset 10" in why and "committed by batch b1" in why


@pytest.mark.parametrize("committed", [None, 0, 15, 30])
def test_any_other_committed_offset_fences(committed):
    outcome, why = decide(PART, "b1", "g", committed, None)
    assert outcome == FENCED and "group g has" in why


def test_a_first_range_is_fenced_when_the_group_already_has_an_offset():
    assert decide(FIRST, "b1", "g", 0, None)[0] == FENCED


def test_a_record_is_json_with_exact_numbers_and_zoned_instants():
    names = ["id", "amount", "at", "day", "tags", "doc"]
    typed = [
        "a",
        Decimal("12.50"),
        datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        date(2026, 1, 2),
        [1, 2],
        {"x": 1},
    ]
    text = json_value(names, typed).decode()
    assert '"amount":12.50' in text  # the digits as declared, not a float's
    assert json.loads(text) == {
        "id": "a",
        "amount": 12.5,
        "at": "2026-01-02T03:04:05.000006Z",
        "day": "2026-01-02",
        "tags": [1, 2],
        "doc": {"x": 1},
    }


def test_an_instant_keeps_its_zone_and_jsonb_its_exact_digits():
    names = ["at", "doc"]
    typed = [
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        {"n": Decimal("0.10000000000000000001"), "big": 2**70, "s": "é\u2028"},
    ]
    text = json_value(names, typed).decode()
    assert '"at":"2026-01-02T03:04:05-05:30"' in text
    assert '"n":0.10000000000000000001' in text and f'"big":{2**70}' in text
    assert json.loads(text)["doc"]["s"] == "é\u2028"


def test_a_key_column_becomes_bytes():
    assert output_key("cus-1") == b"cus-1" and output_key(42) == b"42" and output_key(None) is None


def _load(tmp_path, **spec):
    base = {
        "topics": ["in"],
        "columns": [{"name": "id", "type": "text"}],
        "sink": "kafka",
        "output_topic": "out",
    }
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": {"p": base | spec}}))
    return load_all(settings_mod.load(), path)["p"]


def test_a_kafka_sink_declaration_defaults_its_dead_letter_topic(tmp_path):
    sink = _load(tmp_path).sink
    assert (sink.output_topic, sink.dead_letter_topic, sink.key_column) == ("out", "out.rejected", None)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"output_topic": "in"}, "must all differ"),
        ({"output_topic": None}, "sink: kafka needs one"),
        ({"output_key": "nope"}, "output_key 'nope' is not a declared column"),
        ({"target_table": "raw.t"}, "remove target_table"),
        ({"delivery": "at_most_once"}, "at_most_once"),
        ({"transaction_timeout_ms": 10}, "transaction_timeout_ms must be"),
        ({"sink": "s3"}, "sink 's3' unknown"),
    ],
)
def test_a_wrong_kafka_sink_declaration_is_refused_saying_why(tmp_path, spec, message):
    with pytest.raises(PipelineConfigError, match=message):
        _load(tmp_path, **spec)


def test_two_pipelines_writing_one_topic_are_refused(tmp_path):
    spec = {"columns": [{"name": "id", "type": "text"}], "sink": "kafka", "output_topic": "out"}
    path = tmp_path / "pipelines.yml"
    path.write_text(
        yaml.safe_dump({"pipelines": {"a": {"topics": ["x"], **spec}, "b": {"topics": ["y"], **spec}}})
    )
    with pytest.raises(PipelineConfigError, match=r"'a' and 'b' both write topic out"):
        load_all(settings_mod.load(), path)


def test_the_avro_output_schema_follows_the_declaration():
    import fastavro

    from eosflow.schema.avro_out import output_schema
    from eosflow.schema.declaration import parse_schema
    from tests.avro_clicks import DECLARATION

    schema = output_schema("clicks", parse_schema(DECLARATION, "here"))
    fastavro.parse_schema(schema)  # a schema Avro accepts
    fields = {f["name"]: f for f in schema["fields"]}
    assert [f["name"] for f in schema["fields"]] == [c["name"] for c in DECLARATION["columns"]]
    assert fields["click_id"]["type"] == {"type": "string", "logicalType": "uuid"}  # required: no null
    assert fields["price"]["type"][1] == {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": 12,
        "scale": 2,
    }
    assert (
        fields["tags"]["type"] == ["null", {"type": "array", "items": "string"}]
        and fields["tags"]["default"] is None
    )
    assert fields["attrs"]["type"] == ["null", "string"]  # jsonb travels as its JSON text


class _MovingCoordinator:
    """A consumer whose group coordinator is still loading for its first `failures` calls."""

    def __init__(self, failures: int, code) -> None:
        self.failures, self.code, self.calls = failures, code, 0

    def committed(self, partitions, timeout):
        from confluent_kafka import KafkaError, KafkaException

        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(self.code))
        return partitions


def test_committed_offsets_are_asked_again_while_the_coordinator_moves():
    from confluent_kafka import KafkaError

    from eosflow.sinks.kafka.produce import committed

    # Seen on a fresh cluster: the first committed() of a new group fails with NOT_COORDINATOR.
    consumer = _MovingCoordinator(2, KafkaError.NOT_COORDINATOR)
    assert committed(consumer, ["tp"], 10, sleep=lambda s: None) == ["tp"] and consumer.calls == 3


def test_other_errors_of_committed_offsets_are_not_retried():
    from confluent_kafka import KafkaError, KafkaException

    from eosflow.sinks.kafka.produce import committed

    consumer = _MovingCoordinator(1, KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        committed(consumer, ["tp"], 10, sleep=lambda s: None)
    assert consumer.calls == 1
