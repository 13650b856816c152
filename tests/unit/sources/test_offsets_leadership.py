"""Listing a topic's offsets while a partition's leadership changes (eosflow.sources.kafka.offsets): Kafka
answers NOT_LEADER_FOR_PARTITION or LEADER_NOT_AVAILABLE for a moment (a broker restarting, a leader
moving, a new topic's partitions not led yet), and the question is asked again within the timeout. Found
by the randomized stream schedule in a fresh-clone run: a backfill's resolve failed on it at once."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException

from eosflow.ledger.planner import PartitionOffsets
from eosflow.sources.kafka import offsets


class _Listed:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class _Admin:
    """Answers list_topics with one partition, and list_offsets with `failures` errors first."""

    def __init__(self, failures: list[int]) -> None:
        self.failures = list(failures)
        self.asked = 0

    def list_topics(self, topic: str, timeout: float):
        class _Topic:
            error = None
            partitions = {0: object()}

        class _Meta:
            topics = {topic: _Topic()}

        return _Meta()

    def list_offsets(self, request, **_kw):
        self.asked += 1
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))
        answers = {}
        for tp in request:
            done: Future = Future()
            done.set_result(_Listed(7))
            answers[tp] = done
        return answers


class _Errors:
    def answer(self, kafka, request, timeout):
        return request(timeout)


def _with(monkeypatch, admin: _Admin) -> None:
    monkeypatch.setattr(offsets, "admin_client", lambda kafka: (admin, _Errors()))
    monkeypatch.setattr(offsets.time, "sleep", lambda s: None)


def test_a_moment_without_a_leader_is_asked_again(monkeypatch) -> None:
    from eosflow.pipelines import InitialOffset

    admin = _Admin([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    _with(monkeypatch, admin)
    got = offsets.partition_offsets("broker:9092", "orders", InitialOffset("earliest"))
    assert got == {0: PartitionOffsets(7, 7, None)} and admin.asked == 4  # 2 refused, then earliest, latest


def test_any_other_error_fails_at_once_naming_the_topic(monkeypatch) -> None:
    from eosflow.pipelines import InitialOffset

    admin = _Admin([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    _with(monkeypatch, admin)
    with pytest.raises(RuntimeError, match="could not list offsets of orders: .*[Aa]uthoriz"):
        offsets.partition_offsets("broker:9092", "orders", InitialOffset("earliest"))
    assert admin.asked == 1
