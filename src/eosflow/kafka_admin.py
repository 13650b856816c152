"""Topic administration shared by the producer, the planner and the tests."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from eosflow.errors import PipelineConfigError, StackError
from eosflow.kafka_client import KafkaConfig, client_config


def admin(kafka: str | KafkaConfig) -> AdminClient:
    return AdminClient(client_config(kafka))


def partition_count(bootstrap: str | KafkaConfig, topic: str, timeout: float = 10.0) -> int | None:
    meta = admin(bootstrap).list_topics(topic=topic, timeout=timeout)
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        return None
    return len(info.partitions)


def ensure_topic(
    bootstrap: str | KafkaConfig, topic: str, partitions: int, config: dict[str, str] | None = None, log=print
) -> int:
    """Create the topic with `partitions`, or grow it to that many (Kafka cannot shrink a topic).

    Returns the partition count the topic has afterwards.
    """
    client = admin(bootstrap)
    have = partition_count(bootstrap, topic)
    try:
        if have is None:
            futures = client.create_topics([NewTopic(topic, partitions, 1, config=config or {})])
            futures[topic].result(timeout=30)
            await_known(client, [topic])
            log(f"created topic {topic} with {partitions} partitions")
            return partitions
        if partitions > have:
            futures = client.create_partitions([NewPartitions(topic, partitions)])
            futures[topic].result(timeout=30)
            log(f"grew topic {topic} from {have} to {partitions} partitions")
            return partitions
    except KafkaException as exc:
        raise StackError(f"could not create or grow topic {topic!r}: {exc.args[0].str()}") from exc
    return have


def delete_topic(bootstrap: str | KafkaConfig, topic: str) -> None:
    client = admin(bootstrap)  # held until the futures resolve: a collected client fails them (_DESTROY)
    futures = client.delete_topics([topic], operation_timeout=30)
    try:
        futures[topic].result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != -188 and "UNKNOWN_TOPIC" not in exc.args[0].name():
            raise


def create_topics(client: AdminClient, topics: list, log=print, timeout_s: float = 30.0) -> None:
    """Create `topics` (confluent-kafka NewTopic values); one a concurrent run made first is fine.

    Returns once the broker lists them, so the next request about them does not find them unknown."""
    from confluent_kafka import KafkaError, KafkaException

    for topic, future in client.create_topics(topics).items():
        try:
            future.result(timeout=timeout_s)
            log(f"created topic {topic}")
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise PipelineConfigError(
                    f"could not create topic {topic!r}: {exc.args[0].str()}; create it yourself or give "
                    "eosflow's Kafka user the right to"
                ) from exc
    await_known(client, [t.topic for t in topics], timeout_s)


def await_known(client: AdminClient, topics: Sequence[str], timeout_s: float = 30.0) -> None:
    """Wait until the broker's metadata holds `topics`. CreateTopics answers once the controller has a
    topic; a broker applies it a moment later, and a busy one answers UNKNOWN_TOPIC_OR_PART meanwhile
    (a run that described the configs of its just-made dead-letter topic failed so)."""
    deadline = time.monotonic() + timeout_s
    wanted = set(topics)
    while True:
        listed = client.list_topics(timeout=max(1.0, deadline - time.monotonic())).topics
        unknown = sorted(t for t in wanted if t not in listed or listed[t].error is not None)
        if not unknown:
            return
        if time.monotonic() >= deadline:
            raise StackError(
                f"Kafka created {', '.join(unknown)} but its broker did not list them within "
                f"{timeout_s:g} s; check the broker's log, then run again"
            )
        time.sleep(0.05)


# librdkafka's message.max.bytes (and batch.size) unless the Kafka settings say otherwise.
PRODUCER_MAX_BYTES = 1_000_000


@dataclass(frozen=True)
class TopicLimits:
    """What the topics a producer writes accept: the largest record batch (and whose limit that is), and
    which of them are compacted (Kafka refuses a record without a key there)."""

    bytes: int
    source: str = "message.max.bytes"
    compacted: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return f"{self.source} ({self.bytes:,})"

    def producer_config(self) -> dict[str, int]:
        """A batch above a topic's max.message.bytes is refused whole, small records and all."""
        return {"batch.size": self.bytes} if self.bytes < PRODUCER_MAX_BYTES else {}

    def keyless_refused(self, topic: str) -> str | None:
        """Why `topic` would refuse a record without a key, or None."""
        if topic in self.compacted:
            return f"{topic} is compacted (cleanup.policy compact): Kafka refuses records without a key"
        return None

    def refuse_a_compacted_dead_letter_topic(self, topic: str) -> None:
        """Dead letters keep the key they had, often none; and compaction would delete all but one per key."""
        if topic in self.compacted:
            raise PipelineConfigError(
                f"dead-letter topic {topic} is compacted (cleanup.policy compact): it would refuse a dead "
                "letter without a key and keep only the last one of each key. Nothing was produced; give "
                "dead_letter_topic a topic with cleanup.policy delete"
            )


def topic_limits(kafka: str | KafkaConfig, topics: Sequence[str], timeout_s: float = 30.0) -> TopicLimits:
    """The producer's message.max.bytes, or a topic's own max.message.bytes where that is lower (the broker
    refuses a record batch above it), and the compacted ones: a record a topic cannot take must become a
    dead letter before it is produced, else it fails the transaction, or is lost by an at-least-once
    producer."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    producer = {} if isinstance(kafka, str) else dict(kafka)
    limit, source = int(producer.get("message.max.bytes", PRODUCER_MAX_BYTES)), "message.max.bytes"
    compacted = set()
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    client = admin(kafka)  # kept: the futures fail if the client is collected first
    for resource, future in client.describe_configs(resources).items():
        config = future.result(timeout=timeout_s)
        entry = config.get("max.message.bytes")
        if entry is not None and entry.value and int(entry.value) < limit:
            limit, source = int(entry.value), f"{resource.name}'s max.message.bytes"
        policy = config.get("cleanup.policy")
        if policy is not None and "compact" in (policy.value or ""):
            compacted.add(resource.name)
    return TopicLimits(limit, source, frozenset(compacted))
