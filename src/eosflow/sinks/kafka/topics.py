"""A Kafka sink's topics and transaction settings, checked before anything is planned or produced."""

from __future__ import annotations

from collections.abc import Mapping

from eosflow.delivery import Delivery
from eosflow.errors import PipelineConfigError
from eosflow.kafka_admin import create_topics, topic_limits
from eosflow.sinks.kafka.output import output_of
from eosflow.sinks.protocol import Pipeline

_TIMEOUT_S = 30.0


class TransactionTimeoutError(PipelineConfigError):
    """The pipeline's transaction timeout is above what the brokers allow."""


def prepare(kafka: Mapping[str, str], pipeline: Pipeline, log=print) -> None:
    """Refuse a transaction timeout the brokers would refuse, and make missing output topics."""
    from confluent_kafka.admin import AdminClient

    client = AdminClient(dict(kafka))
    if pipeline.delivery == Delivery.EXACTLY_ONCE:
        check_transaction_timeout(client, pipeline)
    metadata = client.list_topics(timeout=_TIMEOUT_S)
    source = metadata.topics.get(pipeline.topic)
    partitions = len(source.partitions) if source is not None and source.partitions else 1
    sink = output_of(pipeline)
    changes = pipeline.schema.changes is not None
    if changes and source is None:
        # Not before the source exists (Debezium makes it with its first change): the state topic needs its
        # partition count. Planning says the source is missing.
        return
    missing = [t for t in (sink.output_topic, sink.dead_letter_topic) if t not in metadata.topics]
    if missing:
        from confluent_kafka.admin import NewTopic

        # As many partitions as the source; replication -1: the cluster's default.replication.factor.
        # A change stream's output is its state: compacted, each key's last record kept.
        create_topics(
            client,
            [
                NewTopic(t, partitions, -1, config=_COMPACT if changes and t == sink.output_topic else {})
                for t in missing
            ],
            log,
        )
    limits = topic_limits(kafka, [sink.output_topic, sink.dead_letter_topic])
    limits.refuse_a_compacted_dead_letter_topic(sink.dead_letter_topic)
    if changes and sink.output_topic not in missing:  # one made just now is made right
        output = metadata.topics[sink.output_topic]
        refuse_unfit_state_topic(
            pipeline, sink.output_topic in limits.compacted, len(output.partitions), partitions
        )
        warn_of_short_tombstones(client, sink.output_topic, log)


def warn_of_short_tombstones(client, topic: str, log) -> None:
    """An existing state topic may drop tombstones early: say what that risks (not refused: the
    operator chose it, and Kafka's default is a day)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    (future,) = client.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    entry = future.result(timeout=_TIMEOUT_S).get("delete.retention.ms")
    kept = int(entry.value) if entry is not None and entry.value is not None else None
    if kept is not None and kept < TOMBSTONE_RETENTION_MS:
        log(
            f"warning: {topic} keeps a deleted key's tombstone {kept / 3_600_000:g} h (delete.retention.ms): "
            "a change of the key re-delivered later than that after its delete brings the row back. Raise it "
            f"(kafka-configs --alter --entity-type topics --entity-name {topic} --add-config "
            f"delete.retention.ms={TOMBSTONE_RETENTION_MS}); eosflow creates state topics so"
        )


# A deleted key's tombstone is what makes a re-delivered older change of it superseded (the restore finds
# nothing else of the key): kept a century rather than Kafka's default day. Not Long.MAX_VALUE: the
# cleaner adds it to the current time (KIP-534).
TOMBSTONE_RETENTION_MS = 100 * 365 * 86_400_000
_COMPACT = {"cleanup.policy": "compact", "delete.retention.ms": str(TOMBSTONE_RETENTION_MS)}


class StateTopicError(PipelineConfigError):
    """A change stream's existing output topic cannot hold its state."""


def refuse_unfit_state_topic(
    pipeline: Pipeline, compacted: bool, output_partitions: int, source_partitions: int
) -> None:
    """Before anything is written: the output topic compacts (else it keeps every change forever and is
    no state), and has a partition for every source partition (a change goes to its source's number)."""
    topic = output_of(pipeline).output_topic
    if not compacted:
        raise StateTopicError(
            f"pipeline {pipeline.name!r} keeps a change stream's state in {topic}, which does not compact "
            "(its cleanup.policy has no compact): set it (kafka-configs --alter --entity-type topics "
            f"--entity-name {topic} --add-config cleanup.policy=compact), or name a new output_topic, "
            "which eosflow creates compacted"
        )
    if output_partitions < source_partitions:
        raise StateTopicError(
            f"pipeline {pipeline.name!r}: output topic {topic} has {output_partitions} partition(s) and its "
            f"source {pipeline.topic} has {source_partitions}: each source partition's changes go to the "
            "output partition of the same number; add partitions to the output topic (kafka-topics --alter "
            f"--partitions {source_partitions}), or name a new output_topic"
        )


def check_transaction_timeout(client, pipeline: Pipeline) -> None:
    """transaction.timeout.ms must not exceed any broker's transaction.max.timeout.ms: the broker would
    refuse init_transactions (INVALID_TRANSACTION_TIMEOUT) inside every Spark task."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    brokers = client.list_topics(timeout=_TIMEOUT_S).brokers
    resources = [ConfigResource(ResourceType.BROKER, str(b)) for b in sorted(brokers)]
    wanted = output_of(pipeline).transaction_timeout_ms
    for resource, future in client.describe_configs(resources).items():
        entry = future.result(timeout=_TIMEOUT_S).get("transaction.max.timeout.ms")
        if entry is not None and entry.value is not None and wanted > int(entry.value):
            raise TransactionTimeoutError(
                f"pipeline {pipeline.name!r}: transaction_timeout_ms {wanted} is above broker "
                f"{resource.name}'s transaction.max.timeout.ms ({entry.value}); lower transaction_timeout_ms "
                "in the pipelines file (the default is 60000), or raise the broker's limit"
            )
