"""The user's own Kafka and Postgres: the whole configuration reaches every client, assembled safely."""

from __future__ import annotations

import dataclasses

import pytest
from psycopg.conninfo import conninfo_to_dict

from eosflow import settings as settings_mod
from eosflow.kafka_client import KafkaConfigError, client_config, redacted

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


def test_a_configuration_without_brokers_is_refused_naming_the_setting():
    with pytest.raises(KafkaConfigError, match="no bootstrap.servers"):
        client_config({"security.protocol": "SSL"})


def test_secrets_never_reach_a_log_line():
    shown = redacted({"bootstrap.servers": "b:1", "sasl.password": "s3cret", "sasl.username": "u"})
    assert shown == {"bootstrap.servers": "b:1", "sasl.password": "***", "sasl.username": "u"}


def test_a_spark_connect_url_is_taken_and_anything_else_refused_before_a_run(monkeypatch):
    from eosflow.spark.connect import minor, shown

    monkeypatch.delenv("EOSFLOW_SPARK_REMOTE", raising=False)
    assert settings_mod.load().spark_remote == ""  # each run starts its own Spark
    monkeypatch.setenv("EOSFLOW_SPARK_REMOTE", " sc://spark.example:15002 ")
    assert settings_mod.load().spark_remote == "sc://spark.example:15002"
    monkeypatch.setenv("EOSFLOW_SPARK_REMOTE", "spark://master:7077")
    with pytest.raises(SystemExit, match=r"not a Spark Connect URL: set it to sc://host:port"):
        settings_mod.load()
    assert (minor("4.3.0"), minor("4.3.1"), minor("4.2.0")) == ("4.3", "4.3", "4.2")
    assert shown("sc://spark.example:15002/;token=s3cret;use_ssl=true") == "sc://spark.example:15002"
