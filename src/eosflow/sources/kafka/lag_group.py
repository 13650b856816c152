"""A pipeline's positions reported to a Kafka consumer group after its commit, so Kafka's own tools
(kafka-consumer-groups, Burrow, the dashboards teams alert on) show its lag (docs/DESIGN.md, "Lag in
Kafka's own tools"). A report only: nothing of eosflow reads the group back, and a report that fails
leaves a committed run committed, with a warning in its log."""

from __future__ import annotations

import re
from collections.abc import Callable

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from eosflow.errors import PipelineConfigError
from eosflow.kafka_client import KafkaConfig, admin_client
from eosflow.ledger.ranges import Plan

# Kafka's own limit and characters for a group id are looser; these are the ones every tool prints plainly
# and every ACL pattern takes, as for topic names.
_GROUP = re.compile(r"[A-Za-z0-9._-]{1,249}")
RESERVED = "eosflow."  # eosflow's own groups: each pipeline's default, a Kafka sink's positions, the observer
TIMEOUT_S = 10.0


def default(pipeline: str) -> str:
    """The group a pipeline reports to unless `consumer_group:` names another (a Kafka sink's positions
    are this group's offsets, committed in its transactions)."""
    return f"{RESERVED}{pipeline}"


def declared(raw: object, pipeline: str, where: str) -> str | None:
    """`consumer_group:` as declared: absent, the default; false, no report; else a validated group id."""
    if raw is None:
        return default(pipeline)
    if raw is False:
        return None
    if not isinstance(raw, str) or not _GROUP.fullmatch(raw) or raw.startswith(RESERVED):
        raise PipelineConfigError(
            f"{where}: consumer_group {raw!r} must be a Kafka group id of 1 to 249 letters, digits, '.', '_' "
            f"or '-', not starting with {RESERVED!r} (eosflow's own groups), or false for no lag report; "
            f"leave it out for {default(pipeline)!r}"
        )
    return raw


def report(kafka: KafkaConfig, group: str, plan: Plan, log: Callable[[str], None]) -> bool:
    """Commit the plan's range ends (its partitions' new positions) as `group`'s offsets. False, with the
    reason in the log, when Kafka refuses or does not answer: the run committed all the same."""
    offsets = [TopicPartition(r.topic, r.partition, r.end) for r in plan.ranges]
    if not offsets:
        return True
    try:
        admin, _ = admin_client(kafka)
        request = [ConsumerGroupTopicPartitions(group, offsets)]
        futures = admin.alter_consumer_group_offsets(request, request_timeout=TIMEOUT_S)
        answered = next(iter(futures.values())).result(timeout=TIMEOUT_S + 5)
        failed = [tp for tp in answered.topic_partitions if tp.error is not None]
        if failed:
            raise KafkaException(failed[0].error)
    except (KafkaException, TimeoutError) as exc:
        log(
            f"warning: the run committed, but consumer group {group!r} was not updated with its positions "
            f"({_reason(exc)}); Kafka's tools show its lag from the last report until the next commit. The "
            "group is a report only: nothing eosflow does reads it"
        )
        return False
    return True


def _reason(exc: BaseException) -> str:
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if error is not None and hasattr(error, "str"):
        return f"{error.name()}: {error.str()}"
    return str(exc) or type(exc).__name__
