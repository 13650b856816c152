"""The user's own Kafka and Postgres: the whole configuration reaches every client, assembled safely."""

from __future__ import annotations

import dataclasses

import pytest
from psycopg.conninfo import conninfo_to_dict

from eosflow import settings as settings_mod
from eosflow.kafka_client import KafkaConfigError, client_config, redacted, spark_options

AWKWARD = 'p w\'d "x" \\ @:/?#&='


def test_a_password_with_spaces_quotes_and_backslashes_reaches_libpq_as_itself():
    # conninfo_to_dict is libpq's own parser (PQconninfoParse): what it reads is what connect() uses.
    s = dataclasses.replace(settings_mod.load(), pg_password=AWKWARD, pg_options=(("sslmode", "require"),))
    assert conninfo_to_dict(s.warehouse_dsn) == {
        "host": s.pg_host,
        "port": str(s.pg_port),
        "dbname": s.pg_database,
        "user": s.pg_user,
        "password": AWKWARD,
        "sslmode": "require",
    }
    # The URI form (Airflow connections) carries the same password and options.
    assert conninfo_to_dict(s.warehouse_uri)["password"] == AWKWARD
    assert conninfo_to_dict(s.warehouse_uri)["sslmode"] == "require"


def test_the_kafka_configuration_comes_from_the_environment_whole(monkeypatch):
    monkeypatch.setenv("EOSFLOW_KAFKA_BOOTSTRAP_SERVERS", "b1:9092,b2:9092")
    monkeypatch.setenv("EOSFLOW_KAFKA_CONFIG", '{"security.protocol": "SASL_SSL", "sasl.username": "u"}')
    monkeypatch.setenv("EOSFLOW_PG_OPTIONS", '{"sslmode": "verify-full", "connect_timeout": 5}')
    s = settings_mod.load()
    assert s.kafka == {
        "bootstrap.servers": "b1:9092,b2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.username": "u",
    }
    assert dict(s.pg_options) == {"sslmode": "verify-full", "connect_timeout": "5"}


def test_a_configuration_that_is_not_a_json_object_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("EOSFLOW_KAFKA_CONFIG", "security.protocol=SSL")
    with pytest.raises(SystemExit, match="EOSFLOW_KAFKA_CONFIG is not JSON"):
        settings_mod.load()


def test_sasl_credentials_become_the_java_clients_login_for_spark():
    options = spark_options(
        {
            "bootstrap.servers": "b:1",
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "me",
            "sasl.password": 'p"w\\',
            "ssl.ca.location": "/etc/ca.pem",
            "client.id": "eosflow",
        }
    )
    assert options == {
        "kafka.bootstrap.servers": "b:1",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="me" password="p\\"w\\\\";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem",
        "kafka.client.id": "eosflow",
    }


def test_what_spark_cannot_be_given_is_refused_naming_the_setting():
    with pytest.raises(KafkaConfigError, match="ssl.key.location"):
        spark_options({"bootstrap.servers": "b:1", "ssl.key.location": "/k.pem"})
    with pytest.raises(KafkaConfigError, match="GSSAPI"):
        spark_options({"bootstrap.servers": "b:1", "sasl.mechanism": "GSSAPI", "sasl.username": "u"})
    with pytest.raises(KafkaConfigError, match="no bootstrap.servers"):
        client_config({"security.protocol": "SSL"})


def test_secrets_never_reach_a_log_line():
    shown = redacted({"bootstrap.servers": "b:1", "sasl.password": "s3cret", "sasl.username": "u"})
    assert shown == {"bootstrap.servers": "b:1", "sasl.password": "***", "sasl.username": "u"}
