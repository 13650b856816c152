"""The Iceberg SQL catalog's URI carries the warehouse password quoted, and shows it nowhere else."""

from __future__ import annotations

import dataclasses
import traceback

import pytest
from sqlalchemy.engine import make_url

from eosflow import settings as settings_mod
from eosflow.errors import PipelineConfigError
from eosflow.sinks.iceberg.config import CatalogConfig

PASSWORD = "p@ss:w/o%rd#x?y z"


def _settings(**changes) -> settings_mod.Settings:
    return dataclasses.replace(settings_mod.load(), **changes)


def test_a_password_with_url_characters_parses_back_whole(monkeypatch) -> None:
    monkeypatch.delenv("EOSFLOW_ICEBERG_CATALOG_URI", raising=False)
    settings = _settings(pg_user="eos@flow", pg_password=PASSWORD, pg_host="db.example", pg_database="wh/1")
    url = make_url(CatalogConfig.of(settings).properties["uri"])
    assert (url.drivername, url.username, url.password) == ("postgresql+psycopg", "eos@flow", PASSWORD)
    assert (url.host, url.port, url.database) == ("db.example", settings.pg_port, "wh/1")


def test_the_password_is_not_in_the_repr(monkeypatch) -> None:
    monkeypatch.delenv("EOSFLOW_ICEBERG_CATALOG_URI", raising=False)
    where = CatalogConfig.of(_settings(pg_password=PASSWORD))
    assert PASSWORD not in repr(where) and "p%40ss" not in repr(where)


def test_an_unparsable_uri_is_refused_without_showing_it(monkeypatch) -> None:
    # Unquoted, `s3cr@t:9x/z` makes SQLAlchemy read a port `9x`, and its error quotes that piece.
    monkeypatch.setenv(
        "EOSFLOW_ICEBERG_CATALOG_URI", "postgresql+psycopg://eos:s3cr@t:9x/z@localhost:5432/db"
    )
    with pytest.raises(PipelineConfigError) as caught:
        CatalogConfig.of(_settings())
    message = "".join(traceback.format_exception(caught.value))  # what a log would print
    assert "EOSFLOW_ICEBERG_CATALOG_URI" in message
    for piece in ("s3cr", "t:9x", "9x", "/z@"):
        assert piece not in message
