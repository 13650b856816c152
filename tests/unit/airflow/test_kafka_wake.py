"""Kafka-woken ingest DAGs: the `wake_on_records` declaration and the wake-up's own consumer group."""

from __future__ import annotations

import pytest
import yaml

from eosflow import settings as settings_mod
from eosflow.pipelines import PipelineConfigError, load_all


def _load(tmp_path, **changes):
    spec = {
        "topics": ["orders"],
        "target_table": "raw.orders",
        "columns": [{"name": "id", "type": "text", "required": True}],
    } | changes
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": {"p": spec}}))
    return load_all(settings_mod.load(), path)["p"]


def test_waking_is_opt_in_per_pipeline(tmp_path):
    assert _load(tmp_path).wake_on_records is False
    assert _load(tmp_path, wake_on_records=True).wake_on_records is True


@pytest.mark.parametrize("value", ["true", 1, None, "records"])
def test_a_wake_on_records_that_is_not_a_boolean_is_refused_naming_the_fix(tmp_path, value):
    with pytest.raises(PipelineConfigError, match=r"pipeline 'p'.*wake_on_records .* true or false"):
        _load(tmp_path, wake_on_records=value)


# -- the trigger: its own group, one wake-up per backlog, nothing of the record passed on ------------------
class _Message:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def error(self):
        return None

    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


class _Failed(_Message):
    def __init__(self, error) -> None:
        super().__init__(0, -1)
        self._error = error

    def error(self):
        return self._error


class _Consumer:
    """Two partitions with a backlog; it hands out `first` (if any), then a record of partition 0."""

    def __init__(self, ends: dict[int, int], first: list | None = None) -> None:
        self.ends, self.commits, self.closed = ends, [], False
        self.queue = [*(first or []), _Message(0, 7)]

    def poll(self, timeout):
        return self.queue.pop(0) if self.queue else None

    def assignment(self):
        from confluent_kafka import TopicPartition

        return [TopicPartition("orders", p) for p in self.ends]

    def get_watermark_offsets(self, tp, timeout, cached):
        assert cached is False  # the ends now, not the last fetch's
        return 0, self.ends[tp.partition]

    def commit(self, message=None, offsets=None, asynchronous=True):
        assert asynchronous is False
        self.commits.append(offsets if offsets is not None else message)

    def close(self):
        self.closed = True


def _trigger(**changes):
    from eosflow_airflow.triggers.wake import PipelineWakeTrigger

    kwargs = {
        "topics": ["orders"],
        "group_id": "eosflow.wake.orders",
        "apply_function": "eosflow_airflow.triggers.wake.records_arrived",
    } | changes
    return PipelineWakeTrigger(**kwargs)


def _fire(monkeypatch, consumer: _Consumer, **changes) -> tuple[list, list[dict]]:
    """The trigger's events with `consumer` as its Kafka consumer, and the client configurations asked."""
    import asyncio

    from eosflow_airflow.triggers import wake

    configs = []

    def get_consumer(hook):
        configs.append(hook._build_config())
        return consumer

    monkeypatch.setattr(wake._WakeConsumerHook, "get_consumer", get_consumer)
    monkeypatch.setattr(
        wake.KafkaConsumerHook, "_build_config", lambda self: {"bootstrap.servers": "k:9092", "group.id": "x"}
    )
    trigger = _trigger(**changes)

    async def events():
        found = [e async for e in trigger.run()]
        await trigger.cleanup()
        return found

    return asyncio.run(events()), configs


def test_a_wake_up_fires_once_and_commits_its_group_at_the_end_of_every_partition(monkeypatch):
    consumer = _Consumer({0: 5000, 1: 1234})
    found, configs = _fire(monkeypatch, consumer)
    assert [e.payload for e in found] == [{"records_arrived": True, "topic": "orders"}]  # no offset in it
    assert [(tp.partition, tp.offset) for tp in consumer.commits[0]] == [(0, 5000), (1, 1234)]
    assert len(consumer.commits) == 1 and consumer.closed
    assert configs[0]["group.id"] == "eosflow.wake.orders"  # the connection's own group.id is not used
    assert configs[0]["enable.auto.commit"] is False
    assert configs[0]["isolation.level"] == "read_committed"


def test_a_missing_topic_or_a_broker_away_keeps_the_watcher_watching(monkeypatch):
    from confluent_kafka import KafkaError

    missing = _Failed(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    consumer = _Consumer({0: 8, 1: 0}, first=[missing, None])
    found, _ = _fire(monkeypatch, consumer, poll_interval=0)
    assert len(found) == 1 and [(tp.partition, tp.offset) for tp in consumer.commits[0]] == [(0, 8), (1, 0)]


def test_a_fatal_consumer_error_ends_the_trigger(monkeypatch):
    from confluent_kafka import KafkaError

    fenced = _Failed(KafkaError(KafkaError._FATAL, fatal=True))
    with pytest.raises(RuntimeError, match="eosflow.wake.orders"):
        _fire(monkeypatch, _Consumer({0: 1}, first=[fenced]), poll_interval=0)


@pytest.mark.parametrize("group", ["eosflow.orders", "orders", "eosflow.wakeorders"])
def test_a_trigger_refuses_any_group_but_a_wake_group(group):
    with pytest.raises(ValueError, match=r"eosflow\.wake\.<pipeline>"):
        _trigger(group_id=group)


def test_wake_groups_and_kafka_sink_groups_never_meet():
    from eosflow.sinks.kafka.produce import group_id
    from eosflow_airflow.triggers.wake import wake_group_id

    assert wake_group_id("orders") == "eosflow.wake.orders" != group_id("orders")
    assert wake_group_id("wake") != group_id("wake")  # a pipeline named wake: eosflow.wake, no clash


def test_the_trigger_serializes_to_itself_with_its_group():
    from airflow.providers.common.compat.module_loading import import_string

    path, kwargs = _trigger().serialize()
    assert path == "eosflow_airflow.triggers.wake.PipelineWakeTrigger"
    again = import_string(path)(**kwargs)
    assert again.serialize() == (path, kwargs) and kwargs["group_id"] == "eosflow.wake.orders"
