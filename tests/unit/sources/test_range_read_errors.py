"""How a range read takes librdkafka's consumer errors: a broker blip is waited out, never a failed read."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from eosflow.sources.kafka.range_read import judge


@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        # A broker restarting or a leader moving: librdkafka retries by itself (and says retriable() False).
        (KafkaError._TRANSPORT, "wait"),
        (KafkaError._ALL_BROKERS_DOWN, "wait"),
        (KafkaError.NOT_LEADER_FOR_PARTITION, "wait"),
        (KafkaError._TIMED_OUT, "wait"),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, "wait"),  # metadata not there yet; a deleted topic stalls
        (KafkaError._PARTITION_EOF, "end"),
        (KafkaError.OFFSET_OUT_OF_RANGE, "lost"),
        (KafkaError._AUTO_OFFSET_RESET, "lost"),
        (KafkaError._AUTHENTICATION, "fail"),
        (KafkaError.SASL_AUTHENTICATION_FAILED, "fail"),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "fail"),
    ],
)
def test_each_consumer_error_has_its_meaning_for_the_read(code, verdict):
    assert judge(KafkaError(code)) == verdict


def test_a_fatal_error_fails_the_read_whatever_its_code():
    assert judge(KafkaError(KafkaError._TRANSPORT, fatal=True)) == "fail"
