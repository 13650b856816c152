"""Topics eosflow creates are usable the moment it says so (the real broker).

Kafka answers CreateTopics once its controller has the topic; the broker that answers the next request may
not have it in its metadata yet, and says UNKNOWN_TOPIC_OR_PART. A run that made its output or dead-letter
topic and then read their configs failed that way in CI.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

from eosflow.kafka_admin import admin, create_topics, delete_topic, ensure_topic, topic_limits

pytestmark = pytest.mark.integration


def test_topics_create_topics_made_have_their_configs_read_at_once(running_stack):
    bootstrap = running_stack.bootstrap_servers
    names = [f"test.admin.{uuid.uuid4().hex[:10]}" for _ in range(20)]
    client = admin(bootstrap)
    try:
        # A broker busy with other topics (here: deleting 20) applies new metadata later.
        busy = [f"test.admin.{uuid.uuid4().hex[:10]}" for _ in range(20)]
        create_topics(client, [NewTopic(n, 1, -1) for n in busy], log=lambda m: None)
        for future in client.delete_topics(busy, operation_timeout=30).values():
            future.result(timeout=30)
        create_topics(client, [NewTopic(n, 1, -1) for n in names], log=lambda m: None)
        # The same client at once: before the fix all 20 were UNKNOWN_TOPIC_OR_PART here, nearly every time.
        futures = client.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names])
        assert all(f.result(timeout=30) is not None for f in futures.values())
        assert topic_limits(bootstrap, names).compacted == frozenset()
    finally:
        for name in names:
            delete_topic(bootstrap, name)


def test_a_topic_ensure_topic_made_has_its_configs_read_at_once(running_stack):
    bootstrap = running_stack.bootstrap_servers
    names = [f"test.admin.{uuid.uuid4().hex[:10]}" for _ in range(8)]
    try:
        for name in names:
            ensure_topic(bootstrap, name, 1, config={"cleanup.policy": "compact"}, log=lambda m: None)
            assert topic_limits(bootstrap, [name]).compacted == {name}
    finally:
        for name in names:
            delete_topic(bootstrap, name)
