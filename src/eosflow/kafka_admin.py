"""Topic administration shared by the producer, the planner and the tests."""

from __future__ import annotations

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
    """Create `topics` (confluent-kafka NewTopic values); one a concurrent run made first is fine."""
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
