"""Kafka Connect's pieces that need no server: the jar set's layout, the worker's and a connector's
configuration, slot names."""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from eosflow.errors import StackError
from eosflow_dev.runtime import jars
from eosflow_dev.stack import connect, optional
from eosflow_dev.stack import settings as settings_mod

REAL = settings_mod.load()
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _pom_property(name: str, prop: str) -> str:
    pom = ET.parse(REAL.root / "infra" / "maven" / name / "pom.xml").getroot()
    return pom.find(f"m:properties/m:{prop}", NS).text


def test_the_worker_is_kafkas_own_at_the_brokers_version_and_debezium_has_a_folder_of_its_own():
    version = _pom_property("kafka", "kafka.version")
    assert _pom_property("connect", "kafka.version") == version
    locked = set(jars.locked(REAL, "connect"))
    for artifact in ("connect-runtime", "connect-api", "connect-json", "connect-transforms"):
        assert f"{artifact}-{version}.jar" in locked  # on the worker's classpath (the set's top folder)
    plugin = "plugins/debezium-connector-postgres/"
    assert f"{plugin}debezium-connector-postgres-3.6.1.Final.jar" in locked
    assert f"{plugin}postgresql-42.7.11.jar" in locked  # the JDBC driver only in Debezium's folder
    assert not any(path.startswith("postgresql-") for path in locked)
    # Nothing of Debezium's on the worker's classpath, where it would meet the worker's own jars.
    assert not [p for p in locked if "/" not in p and p.startswith("debezium-")]
    assert {p.rsplit("/", 1)[0] for p in locked if "/" in p} == {plugin.rstrip("/")}


def test_fetching_the_set_runs_both_executions_with_checksums_enforced():
    command = jars.mvn_command(REAL, "connect", "mvn", Path("/tmp/out"))
    assert "--strict-checksums" in command
    assert "dependency:copy-dependencies@worker" in command and "dependency:unpack@debezium" in command


def _private(tmp_path) -> settings_mod.StackSettings:
    return dataclasses.replace(
        REAL, state_dir=tmp_path, connect_port=28099, connect_group="eosflow-connect-t1"
    )


def test_the_worker_runs_distributed_exactly_once_on_loopback_with_its_own_topics(tmp_path):
    svc = connect.ConnectService(_private(tmp_path))
    props = dict(
        line.split("=", 1)
        for line in svc._worker_properties().splitlines()
        if line and not line.startswith("#")
    )
    assert props["exactly.once.source.support"] == "enabled"
    assert props["listeners"] == "http://127.0.0.1:28099"
    assert props["group.id"] == "eosflow-connect-t1"
    topics = [props[f"{kind}.storage.topic"] for kind in ("config", "offset", "status")]
    assert topics == ["eosflow-connect-t1-configs", "eosflow-connect-t1-offsets", "eosflow-connect-t1-status"]
    assert {props[f"{kind}.storage.replication.factor"] for kind in ("config", "offset", "status")} == {"1"}
    assert props["plugin.path"] == str(jars.folder(svc.s, "connect") / "plugins")
    assert props["config.providers.file.param.allowed.paths"] == str(tmp_path / "connect")
    assert props["key.converter"] == props["value.converter"] == connect.JSON_CONVERTER


def test_a_connectors_config_names_the_password_file_never_the_password(tmp_path):
    private = _private(tmp_path)
    password = connect.source_password(private)
    config = connect.postgres_source_config(private, ["orders", "sales.line.items"], "cdc", slot="s1")
    assert password not in repr(config)
    assert config["database.password"] == f"${{file:{tmp_path / 'connect' / 'source.password'}:password}}"
    assert config["table.include.list"] == r"public\.orders,sales\.line\.items"
    assert config["exactly.once.support"] == "required" and config["transaction.boundary"] == "poll"
    assert config["decimal.handling.mode"] == "string" and config["tombstones.on.delete"] == "true"
    assert config["slot.name"] == config["publication.name"] == "s1"
    plain = connect.postgres_source_config(
        private, ["t"], "cdc", slot="s1", exactly_once=False, schemas=False
    )
    assert "exactly.once.support" not in plain and "transaction.boundary" not in plain
    assert plain["value.converter.schemas.enable"] == plain["key.converter.schemas.enable"] == "false"
    with pytest.raises(StackError, match="at least one table"):
        connect.postgres_source_config(private, [], "cdc", slot="s1")


def test_the_password_is_made_once_0600_and_refused_when_others_can_read_it(tmp_path):
    private = _private(tmp_path)
    first = connect.source_password(private)
    assert connect.source_password(private) == first and len(first) >= 32
    path = tmp_path / "connect" / "source.password"
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    with pytest.raises(StackError, match="readable by others") as refused:
        connect.source_password(private)
    assert first not in str(refused.value)


def test_slot_names_are_postgres_identifiers_and_differ_for_names_that_fold_alike():
    names = ["orders-cdc", "orders_cdc", "Orders.CDC", "x" * 200]
    slots = [connect.slot_name(name) for name in names]
    assert len(set(slots)) == len(slots)
    assert all(re.fullmatch(r"[a-z0-9_]{1,63}", slot) for slot in slots)
    assert connect.slot_name("orders-cdc") == connect.slot_name("orders-cdc")


def test_connect_is_asked_for_like_the_other_optional_servers(monkeypatch):
    monkeypatch.delenv(optional.WITH_ENV, raising=False)
    assert optional.requested(["connect,s3"]) == ["s3", "connect"]
    assert isinstance(optional.service(REAL, "connect"), connect.ConnectService)
    assert "connect" in [svc.name for svc in optional.services(REAL)]
