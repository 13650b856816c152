"""The user's own Kafka: a broker listener that requires SASL/PLAIN (the local stack's, port
EOSFLOW_KAFKA_SASL_PORT). Every client eosflow makes must authenticate there: the planner's admin
client, Spark's Kafka source in the job, the producer of the test. With EOSFLOW_KAFKA_* pointing at that
listener and nothing else, a run commits; with a wrong password it fails and says why."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from eosflow.kafka_admin import ensure_topic

pytestmark = pytest.mark.integration


def _sasl(password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "eosflow",
        "sasl.password": password,
    }


def _ingest(case, password: str) -> subprocess.CompletedProcess:
    s = case.settings
    return subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", case.name],
        env=case.env(
            EOSFLOW_KAFKA_BOOTSTRAP_SERVERS=s.sasl_bootstrap_servers,
            EOSFLOW_KAFKA_CONFIG=json.dumps(_sasl(password)),
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_pipeline_on_a_kafka_that_requires_sasl_commits_with_the_configured_credentials(case):
    s = case.settings
    secured = {"bootstrap.servers": s.sasl_bootstrap_servers, **_sasl(s.kafka_sasl_password)}
    ensure_topic(secured, case.topic, 2, log=lambda m: None)
    producer = Producer({**secured, "enable.idempotence": True, "transactional.id": f"{case.name}-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(40):
        producer.produce(case.topic, key=b"k", value=_order(i), partition=i % 2)
    producer.commit_transaction(30)

    done = _ingest(case, s.kafka_sasl_password)

    assert done.returncode == 0, done.stderr[-3000:]
    assert len(case.event_ids()) == 40
    assert case.violations() == []


def test_a_wrong_password_fails_the_run_naming_the_authentication_and_writes_nothing(case):
    s = case.settings
    ensure_topic(s.bootstrap_servers, case.topic, 1, log=lambda m: None)  # the plaintext listener

    done = _ingest(case, "not-the-password")

    assert done.returncode == 2, done.stderr[-3000:]  # refused: no retry helps until the settings change
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"eosflow ingest: FAILED: Kafka at {s.sasl_bootstrap_servers} refused the client's"
    ), last
    assert "Invalid username or password" in last and "EOSFLOW_KAFKA_CONFIG" in last, last
    assert "not-the-password" not in done.stderr
    assert case.ledger() == []


def test_an_unreachable_kafka_fails_naming_the_brokers_and_the_settings_to_check(case):
    done = subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", case.name],
        # The wait for an answer is the user's to set; the default (30 s) would only slow the test.
        env=case.env(EOSFLOW_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", EOSFLOW_KAFKA_TIMEOUT_S="3"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-3000:]  # may be transient: retries stay allowed
    last = _eosflow_line(done.stderr)
    assert last.startswith("eosflow ingest: FAILED: could not reach Kafka at 127.0.0.1:1 ("), last
    assert "EOSFLOW_KAFKA_BOOTSTRAP_SERVERS" in last
    assert "%3|" not in done.stderr  # librdkafka's own retry lines stay out of the user's way


def _order(i: int) -> bytes:
    return json.dumps(
        {
            "event_id": f"00000000-0000-4000-8000-{i:012d}",
            "event_type": "order_paid",
            "event_time": "2026-01-01T00:00:00Z",
            "order_id": f"ord-{i}",
            "customer_id": "cus-1",
            "amount_cents": 100 + i,
            "currency": "EUR",
            "schema_version": 1,
        }
    ).encode()


def _eosflow_line(stderr: str) -> str:
    """eosflow's own last line (other writers to the same stream may come after it)."""
    return [line for line in stderr.splitlines() if line.startswith("eosflow ingest: ")][-1]
