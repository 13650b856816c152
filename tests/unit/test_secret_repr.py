"""Settings and the registry's client configuration keep their secrets out of repr (issue 42).

A repr lands in logs, tracebacks (pytest's, Airflow's) and f-strings; the values it leaves out are
still there for the code that uses them.
"""

from __future__ import annotations

import dataclasses

from eosflow import settings as settings_mod
from eosflow.schema.avro import RegistryConfig


def test_a_settings_repr_holds_no_password_or_client_secret(monkeypatch):
    monkeypatch.setenv("EOSFLOW_PG_PASSWORD", "pg-S3CRET")
    monkeypatch.setenv("EOSFLOW_PG_READER_PASSWORD", "reader-S3CRET")
    monkeypatch.setenv("EOSFLOW_KAFKA_SASL_PASSWORD", "sasl-S3CRET")
    monkeypatch.setenv("EOSFLOW_KAFKA_CONFIG", '{"sasl.password": "kafka-S3CRET"}')
    monkeypatch.setenv("EOSFLOW_SCHEMA_REGISTRY_CONFIG", '{"basic.auth.user.info": "u:registry-S3CRET"}')
    s = settings_mod.load()
    assert "S3CRET" not in repr(s) and "S3CRET" not in str(s)
    assert s.pg_password == "pg-S3CRET" and dict(s.kafka_config)["sasl.password"] == "kafka-S3CRET"
    assert "S3CRET" not in repr(s.registry)
    assert "pg_host=" in repr(s)  # the rest is still there to read


def test_a_registry_configs_repr_holds_no_credentials():
    config = RegistryConfig("http://127.0.0.1:8081", (("basic.auth.user.info", "u:S3CRET"),))
    assert "S3CRET" not in repr(config)
    assert dataclasses.replace(config).config == config.config
