"""A publisher's source position, kept in Kafka: written in the same transaction as its records (the
position as a value, and where at_least_once stores it in the warehouse: eosflow.publish.position).

Each publisher has a compacted one-partition topic of its own, `eosflow.publish.offsets.<name>`, keyed
by `<name>:<shard>`. Of its own because a reader of a shared topic stops at the partition's last
stable offset: another publisher's open transaction there could hide this one's latest committed
position from it, and a publisher that starts from a stale position publishes rows twice. Only this
publisher's transactional id writes its topic, and it is read after `init_transactions` has fenced
and aborted whatever that id left open, so its last stable offset is its end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from eosflow.publish.position import Position
from eosflow.sources.kafka.read_back import read_to_end

if TYPE_CHECKING:
    from eosflow.publish.declaration import Publisher

_TIMEOUT_S = 30.0


def key(publisher: Publisher) -> bytes:
    return f"{publisher.name}:{publisher.shard}".encode()


def ensure_topics(kafka: Mapping[str, str], publisher: Publisher, log: Callable[[str], None] = print) -> None:
    """The offsets topic (compacted, one partition), the output and dead-letter topics (the cluster's
    defaults)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from eosflow.kafka_admin import create_topics

    client = AdminClient(dict(kafka))
    existing = client.list_topics(timeout=_TIMEOUT_S).topics
    wanted = []
    if publisher.offsets_topic not in existing:
        wanted.append(NewTopic(publisher.offsets_topic, 1, -1, config={"cleanup.policy": "compact"}))
    for topic in (publisher.topic, publisher.rejected_topic):
        if topic not in existing:
            wanted.append(NewTopic(topic, -1, -1))  # -1: num.partitions, default.replication.factor
    if wanted:
        create_topics(client, wanted, log)


def read(kafka: Mapping[str, str], publisher: Publisher) -> Position | None:
    """The last committed position, read_committed; None before the first transaction (or before the
    publisher's first run made its offsets topic: the view asks about publishers that never ran)."""
    from eosflow.kafka_admin import admin

    # All topics, not list_topics(topic=...): a metadata request naming a topic may create it.
    if publisher.offsets_topic not in admin(kafka).list_topics(timeout=_TIMEOUT_S).topics:
        return None
    found = None
    for m in read_to_end(kafka, [(publisher.offsets_topic, 0, -2)], idle_s=_TIMEOUT_S):
        if m.key() == key(publisher) and m.value() is not None:
            found = Position.from_json(m.value())
    return found
