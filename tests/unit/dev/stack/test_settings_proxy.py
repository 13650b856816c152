"""The PROXIED listener for the producer-retries lab is additive: off by default, nothing changes."""

from __future__ import annotations

import pytest

from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.kafka import KafkaService

# server.properties exactly as written without the proxy option (and as before it existed, but for the log
# cleaner's backoff added since), for these settings.
BEFORE_THE_OPTION = """\
# Written by `eosflow stack up`; edit the environment (EOSFLOW_KAFKA_*), not this file.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:19093
listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093
advertised.listeners=PLAINTEXT://127.0.0.1:19092
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=/srv/eosflow-state/kafka/data
num.partitions=1
auto.create.topics.enable=false
# A single broker: internal topics cannot have more than one replica, or transactions never start.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
# Short enough that a topic with a short retention.ms really loses its old segments in a test.
log.retention.check.interval.ms=5000
log.segment.delete.delay.ms=1000
# The log cleaner looks for compactable logs every second, not every 15 s: a compacted state topic's test
# waits for it (a local broker with few topics; production keeps Kafka's default).
log.cleaner.backoff.ms=1000
"""

PROXY_ENV = ("EOSFLOW_KAFKA_PROXIED_PORT", "EOSFLOW_KAFKA_PROXY_PORT", "EOSFLOW_TOXIPROXY_PORT")


@pytest.fixture
def env(monkeypatch):
    """Default ports, a fixed state folder, and none of the proxy variables set."""
    for name in ("EOSFLOW_KAFKA_HOST", "EOSFLOW_KAFKA_PORT", "EOSFLOW_KAFKA_CONTROLLER_PORT", *PROXY_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EOSFLOW_STATE_DIR", "/srv/eosflow-state")
    monkeypatch.setenv("EOSFLOW_KAFKA_SASL_PORT", "0")  # the SASL listener has its own test below
    return monkeypatch


def test_off_by_default_and_server_properties_unchanged(env):
    s = settings_mod.load()
    assert (s.kafka_proxied_port, s.kafka_proxy_port, s.toxiproxy_api_port) == (0, 19094, 18474)
    kafka = KafkaService(s)
    assert kafka._server_properties() == BEFORE_THE_OPTION
    assert kafka.ports() == {"EOSFLOW_KAFKA_PORT": 19092, "EOSFLOW_KAFKA_CONTROLLER_PORT": 19093}


def test_on_adds_a_listener_that_advertises_the_proxy(env):
    env.setenv("EOSFLOW_KAFKA_PROXIED_PORT", "19403")
    env.setenv("EOSFLOW_KAFKA_PROXY_PORT", "19404")
    env.setenv("EOSFLOW_TOXIPROXY_PORT", "19405")
    s = settings_mod.load()
    assert s.toxiproxy_api_port == 19405
    assert s.proxied_bootstrap_servers == "127.0.0.1:19404"
    kafka = KafkaService(s)
    props = dict(
        line.split("=", 1) for line in kafka._server_properties().splitlines() if not line.startswith("#")
    )
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,PROXIED://127.0.0.1:19403"
    )
    # The broker binds 19403 but tells clients to come back through the proxy on 19404.
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092,PROXIED://127.0.0.1:19404"
    protocols = props["listener.security.protocol.map"]
    assert protocols == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"  # the broker itself never goes through it
    # Everything else is as before.
    before = dict(line.split("=", 1) for line in BEFORE_THE_OPTION.splitlines() if not line.startswith("#"))
    changed = {k for k in props if props[k] != before.get(k)}
    assert changed == {"listeners", "advertised.listeners", "listener.security.protocol.map"}
    # The broker must find its own extra port free; the proxy port is toxiproxy's, not checked here.
    assert kafka.ports() == {
        "EOSFLOW_KAFKA_PORT": 19092,
        "EOSFLOW_KAFKA_CONTROLLER_PORT": 19093,
        "EOSFLOW_KAFKA_PROXIED_PORT": 19403,
    }


def test_a_port_that_is_not_a_number_says_which_variable(env):
    env.setenv("EOSFLOW_KAFKA_PROXIED_PORT", "on")
    with pytest.raises(SystemExit, match="EOSFLOW_KAFKA_PROXIED_PORT='on' is not a whole number"):
        settings_mod.load()


def test_the_sasl_listener_is_one_more_listener_requiring_plain_logins(env):
    env.setenv("EOSFLOW_KAFKA_SASL_PORT", "19095")
    env.setenv("EOSFLOW_KAFKA_SASL_PASSWORD", 'pa"ss')
    s = settings_mod.load()
    props = KafkaService(s)._server_properties()
    added = set(props.splitlines()) - set(BEFORE_THE_OPTION.splitlines())
    assert added == {
        "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,SASL_PLAINTEXT://127.0.0.1:19095",
        "advertised.listeners=PLAINTEXT://127.0.0.1:19092,SASL_PLAINTEXT://127.0.0.1:19095",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
        'PlainLoginModule required user_eosflow="pa\\"ss";',
    }
    assert KafkaService(s).ports()["EOSFLOW_KAFKA_SASL_PORT"] == 19095
