"""Fixtures for the stack's optional servers (eosflow_dev.stack.optional), imported by tests/conftest.py.

`iceberg_rest`, `s3_server` and `connect_server` start the server on the project's own settings if it is
not running (the first time, its jars are fetched: about 15-20 s each from an empty Maven cache) and leave
it running for later tests, as `running_stack` does the stack; `eosflow stack down` stops them. A start is
locked per service, so pytest-xdist workers asking at once start it once.
"""

from __future__ import annotations

import pytest

from eosflow_dev.stack import optional


@pytest.fixture(scope="session")
def iceberg_rest(settings) -> optional.IcebergRestDetails:
    """The stack's Iceberg REST catalog: `.uri` for PyIceberg (`type: rest`), `.warehouse`."""
    return optional.iceberg_rest(settings, log=lambda msg: None)


@pytest.fixture(scope="session")
def s3_server(settings) -> optional.S3Details:
    """The stack's S3 server: `.endpoint`, `.region`, `.bucket`, `.access_key`, `.secret_key` (path-style)."""
    return optional.s3(settings, log=lambda msg: None)


@pytest.fixture(scope="session")
def connect_server(settings) -> optional.ConnectDetails:
    """The stack's Kafka Connect worker with Debezium, on the stack's broker and Postgres: `.endpoint`,
    `.bootstrap_servers`, `.source_database`, `.source_conninfo` (its owner may make tables). Register
    connectors with eosflow_dev.stack.connect.register_postgres_source; use topic prefixes unique per test.
    A Postgres started without wal_level = logical fails here, saying how to restart it."""
    return optional.connect(settings, log=lambda msg: None)


@pytest.fixture(scope="session")
def spark_connect(settings) -> str:
    """The stack's Spark Connect server (Spark 4.3's own): the sc:// URL a run's `spark_remote` takes."""
    return optional.spark_connect(settings, log=lambda msg: None)
