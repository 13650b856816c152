"""Which Iceberg catalog a sink uses: PyIceberg's own configuration, then eosflow's, else the warehouse's
SQL catalog; and what a message may say about it (no secret)."""

from __future__ import annotations

import dataclasses
import json
import traceback

import pytest

from eosflow import settings as settings_mod
from eosflow.errors import PipelineConfigError
from eosflow.sinks.iceberg.config import PROPERTIES_ENV, CatalogConfig
from eosflow.sinks.iceberg.reach import IcebergAccessError, IcebergUnavailableError, classify, reaching

SECRET = "s3cr%t/Key+9"


@pytest.fixture
def clean(monkeypatch, tmp_path):
    """No configuration from the machine: an empty PYICEBERG_HOME, no home file, no variables."""
    for name in (
        "EOSFLOW_ICEBERG_CATALOG",
        "EOSFLOW_ICEBERG_CATALOG_URI",
        "EOSFLOW_ICEBERG_WAREHOUSE",
        PROPERTIES_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PYICEBERG_HOME", str(home))
    monkeypatch.chdir(home)
    import os

    for name in list(os.environ):
        if name.startswith("PYICEBERG_CATALOG"):
            monkeypatch.delenv(name)
    return home


def _settings() -> settings_mod.Settings:
    return dataclasses.replace(settings_mod.load(), pg_password=SECRET)


def test_nothing_configured_is_the_sql_catalog_in_the_warehouse(clean) -> None:
    config = CatalogConfig.of(_settings())
    assert config.name == "eosflow" and config.kind == "sql"
    assert config.properties["uri"].startswith("postgresql+psycopg://")
    assert config.properties["warehouse"].startswith("file://")
    assert config.source == "the embedded SQL catalog"


def test_pyiceberg_yaml_of_the_named_catalog_is_used_as_pyiceberg_would(clean) -> None:
    (clean / ".pyiceberg.yaml").write_text(
        "catalog:\n  lake:\n    uri: http://catalog.example:8181\n    credential: id:" + "topsecret\n"
    )
    import os

    os.environ["EOSFLOW_ICEBERG_CATALOG"] = "lake"
    try:
        config = CatalogConfig.of(_settings())
    finally:
        del os.environ["EOSFLOW_ICEBERG_CATALOG"]
    assert config.kind == "rest" and config.properties["uri"] == "http://catalog.example:8181"
    assert "warehouse" not in config.properties  # no embedded default mixed into a REST catalog
    assert "topsecret" not in config.describe() and "topsecret" not in repr(config)


def test_pyiceberg_variables_then_eosflows_json_override_in_that_order(clean, monkeypatch) -> None:
    monkeypatch.setenv("EOSFLOW_ICEBERG_CATALOG", "lake")
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__URI", "http://one:8181")
    monkeypatch.setenv("PYICEBERG_CATALOG__LAKE__S3__ENDPOINT", "http://s3.one:9000")
    monkeypatch.setenv(PROPERTIES_ENV, json.dumps({"uri": "http://two:8181", "s3.path-style-access": True}))
    config = CatalogConfig.of(_settings())
    assert config.properties["uri"] == "http://two:8181"
    assert config.properties["s3.endpoint"] == "http://s3.one:9000"
    assert config.properties["s3.path-style-access"] == "true"
    assert config.source == f"PyIceberg's configuration + {PROPERTIES_ENV}"


def test_object_storage_alone_keeps_the_sql_catalog_and_moves_the_files(clean, monkeypatch) -> None:
    given = {
        "warehouse": "s3://lake/tables",
        "s3.endpoint": "http://127.0.0.1:19000",
        "s3.secret-access-key": SECRET,
    }
    monkeypatch.setenv(PROPERTIES_ENV, json.dumps(given))
    config = CatalogConfig.of(_settings())
    assert config.kind == "sql" and config.properties["warehouse"] == "s3://lake/tables"
    assert config.properties["uri"].startswith("postgresql+psycopg://")


def test_a_json_that_is_not_an_object_of_strings_is_refused_without_quoting_it(clean, monkeypatch) -> None:
    monkeypatch.setenv(PROPERTIES_ENV, '{"credential": "' + SECRET)
    with pytest.raises(PipelineConfigError) as caught:
        CatalogConfig.of(_settings())
    assert PROPERTIES_ENV in str(caught.value) and SECRET not in str(caught.value)


def test_redact_hides_every_secret_property_and_the_uris_password_raw_and_quoted(clean, monkeypatch) -> None:
    monkeypatch.setenv(
        PROPERTIES_ENV,
        json.dumps(
            {"warehouse": "s3://lake/t", "s3.access-key-id": "AKID1234", "s3.secret-access-key": "sk-999"}
        ),
    )
    config = CatalogConfig.of(_settings())
    text = f"failed: {config.properties['uri']} AKID1234 sk-999 {SECRET}"
    redacted = config.redact(text)
    for secret in ("AKID1234", "sk-999", SECRET, "s3cr%25t%2FKey%2B9"):
        assert secret not in redacted
    assert redacted.count("***") >= 4 and "127.0.0.1" in redacted


def test_reaching_turns_a_refused_store_into_an_access_error_with_no_secret_and_no_chain(
    clean, monkeypatch
) -> None:
    monkeypatch.setenv(
        PROPERTIES_ENV, json.dumps({"warehouse": "s3://lake/t", "s3.secret-access-key": "sk-999"})
    )
    config = CatalogConfig.of(_settings())
    with pytest.raises(IcebergAccessError) as caught, reaching(config, "preparing Iceberg table a.b"):
        raise OSError("AWS Error ACCESS_DENIED during HeadBucket operation: key sk-999 refused")
    printed = "".join(traceback.format_exception(caught.value))
    assert "sk-999" not in printed and "preparing Iceberg table a.b" in printed
    assert "nothing was committed" in printed and "credentials" in printed


def test_classify_sorts_what_the_catalog_and_the_store_raise() -> None:
    import requests
    from pyiceberg.exceptions import CommitFailedException, ForbiddenError, NoSuchTableError

    assert classify(requests.exceptions.ConnectionError("Connection refused")) is IcebergUnavailableError
    assert classify(OSError("curlCode: 7, Couldn't connect to server")) is IcebergUnavailableError
    assert classify(OSError("AWS Error NO_SUCH_BUCKET during HeadBucket: NoSuchBucket")) is IcebergAccessError
    assert classify(ForbiddenError("not yours")) is IcebergAccessError
    assert classify(ValueError("URI missing, please provide using --uri")) is IcebergAccessError
    assert classify(CommitFailedException("stale")) is None  # a fence, decided by the commit
    assert classify(NoSuchTableError("a.b")) is None  # made by ensure_table
    assert classify(KeyError("x")) is None
