"""A Kafka sink's topics and transaction settings, checked before anything is planned or produced."""

from __future__ import annotations

from collections.abc import Mapping

from eosflow.kafka_admin import create_topics, topic_limits
from eosflow.pipelines import Pipeline, PipelineConfigError

_TIMEOUT_S = 30.0


class TransactionTimeoutError(PipelineConfigError):
    """The pipeline's transaction timeout is above what the brokers allow."""


def prepare(kafka: Mapping[str, str], pipeline: Pipeline, log=print) -> None:
    """Refuse a transaction timeout the brokers would refuse, and make missing output topics."""
    from confluent_kafka.admin import AdminClient

    client = AdminClient(dict(kafka))
    if pipeline.delivery == "exactly_once":
        check_transaction_timeout(client, pipeline)
    metadata = client.list_topics(timeout=_TIMEOUT_S)
    source = metadata.topics.get(pipeline.topic)
    partitions = len(source.partitions) if source is not None and source.partitions else 1
    sink = pipeline.sink
    missing = [t for t in (sink.output_topic, sink.dead_letter_topic) if t not in metadata.topics]
    if missing:
        from confluent_kafka.admin import NewTopic

        # As many partitions as the source; replication -1: the cluster's default.replication.factor.
        create_topics(client, [NewTopic(t, partitions, -1) for t in missing], log)
    topic_limits(kafka, [sink.dead_letter_topic]).refuse_a_compacted_dead_letter_topic(sink.dead_letter_topic)


def check_transaction_timeout(client, pipeline: Pipeline) -> None:
    """transaction.timeout.ms must not exceed any broker's transaction.max.timeout.ms: the broker would
    refuse init_transactions (INVALID_TRANSACTION_TIMEOUT) inside every Spark task."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    brokers = client.list_topics(timeout=_TIMEOUT_S).brokers
    resources = [ConfigResource(ResourceType.BROKER, str(b)) for b in sorted(brokers)]
    wanted = pipeline.sink.transaction_timeout_ms
    for resource, future in client.describe_configs(resources).items():
        entry = future.result(timeout=_TIMEOUT_S).get("transaction.max.timeout.ms")
        if entry is not None and entry.value is not None and wanted > int(entry.value):
            raise TransactionTimeoutError(
                f"pipeline {pipeline.name!r}: transaction_timeout_ms {wanted} is above broker "
                f"{resource.name}'s transaction.max.timeout.ms ({entry.value}); lower transaction_timeout_ms "
                "in the pipelines file (the default is 60000), or raise the broker's limit"
            )
