"""What Kafka says about a topic's partitions, under read_committed: the planner's input."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import OffsetSpec

from eosflow.kafka_client import KafkaConfig, admin_client, bootstrap
from eosflow.ledger.planner import PartitionOffsets

if TYPE_CHECKING:  # a declaration loads the sinks, which read Kafka through the sources
    from eosflow.pipelines import InitialOffset


class TopicMissingError(RuntimeError):
    pass


# A moment without a leader (a broker restarting, a leader moving, a new topic's partitions not led yet):
# Kafka's answer to a ListOffsets then, asked again until the caller's timeout. librdkafka's admin client
# does not retry these itself.
_LEADERSHIP = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})


def _listed(admin, topic: str, request: dict[TopicPartition, OffsetSpec], timeout: float) -> dict[int, int]:
    """Each requested partition's offset (under read_committed), asked again while a partition has no
    leader, within `timeout`; any other error (or no leader by then) fails, naming the topic."""
    deadline = time.monotonic() + timeout
    pause = 0.1
    while True:
        try:
            futures = admin.list_offsets(
                request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout
            )
            return {tp.partition: fut.result().offset for tp, fut in futures.items()}
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in _LEADERSHIP and time.monotonic() + pause < deadline:
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            raise RuntimeError(f"could not list offsets of {topic}: {error.str()}") from exc


def partition_offsets(
    kafka: str | KafkaConfig, topic: str, initial: InitialOffset, timeout: float = 30.0
) -> dict[int, PartitionOffsets]:
    admin, errors = admin_client(kafka)
    meta = errors.answer(kafka, lambda seconds: admin.list_topics(topic=topic, timeout=seconds), timeout)
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        raise TopicMissingError(
            f"topic {topic!r} does not exist on {bootstrap(kafka)}; create it (eosflow produce creates it) "
            "or fix the pipeline's topics"
        )
    partitions = sorted(info.partitions)

    def ask(spec: OffsetSpec) -> dict[int, int]:
        return _listed(admin, topic, {TopicPartition(topic, p): spec for p in partitions}, timeout)

    log_start = ask(OffsetSpec.earliest())
    stable_end = ask(OffsetSpec.latest())  # under READ_COMMITTED: the last stable offset
    initial_at: dict[int, int | None] = dict.fromkeys(partitions)
    if initial.kind == "latest":
        initial_at = dict(stable_end)
    elif initial.kind == "offset":
        initial_at = dict.fromkeys(partitions, initial.value)
    elif initial.kind == "timestamp":
        assert initial.value is not None  # the declaration's parser gives a timestamp its milliseconds
        found = ask(OffsetSpec.for_timestamp(initial.value))
        # -1: no record at or after that time yet, so start at the end.
        initial_at = {p: (off if off >= 0 else stable_end[p]) for p, off in found.items()}
    return {p: PartitionOffsets(log_start[p], stable_end[p], initial_at[p]) for p in partitions}


def offsets_for_time(
    kafka: str | KafkaConfig,
    topic: str,
    partitions: list[int],
    epoch_ms: int,
    stable_end: dict[int, int],
    timeout: float = 30.0,
) -> dict[int, int]:
    """Per partition, the first offset whose record time is at or after epoch_ms (the end if none)."""
    admin, _ = admin_client(kafka)
    request = {TopicPartition(topic, p): OffsetSpec.for_timestamp(epoch_ms) for p in partitions}
    found = _listed(admin, topic, request, timeout)
    return {p: (off if off >= 0 else stable_end[p]) for p, off in found.items()}


def topic_id(kafka: str | KafkaConfig, topic: str, timeout: float = 30.0) -> str:
    """Kafka's id of the topic (22 characters, as Kafka prints it): a re-created topic gets a new one."""
    admin, errors = admin_client(kafka)

    def describe(seconds: float):
        return admin.describe_topics(TopicCollection([topic]), request_timeout=seconds)[topic].result()

    try:
        described = errors.answer(kafka, describe, timeout)
    except KafkaException as exc:
        if exc.args[0].code() == 3:  # UNKNOWN_TOPIC_OR_PART
            raise TopicMissingError(
                f"topic {topic!r} does not exist on {bootstrap(kafka)}; create it (eosflow produce creates "
                "it) or fix the pipeline's topics"
            ) from None
        raise RuntimeError(f"could not describe topic {topic}: {exc.args[0].str()}") from exc
    return str(described.topic_id)
