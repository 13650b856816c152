from collections.abc import Iterator

import pytest

from eosflow.schema.avro import RegistryConfig
from tests.integration.ingest_case import IngestCase
from tests.interop.spark_iceberg import Reader, ReaderSession, ensure_reader


@pytest.fixture
def case(running_stack, tmp_path, monkeypatch) -> IngestCase:
    """A pipeline of its own (topic, target table, pipelines file) for one test."""
    c = IngestCase(running_stack, tmp_path / "pipelines.yml")
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(c.config_path))
    return c


@pytest.fixture
def schema_registry(running_stack) -> RegistryConfig:
    """The stack's schema registry: Apicurio Registry's Confluent-compatible API (stack/registry.py)."""
    registry = running_stack.registry
    assert registry is not None, "the stack runs a schema registry unless EOSFLOW_REGISTRY_PORT=0"
    return registry


@pytest.fixture(scope="session")
def spark_reader(settings) -> Reader:
    """Spark 4.1 with Iceberg's runtime (tests/interop/spark_iceberg.py), made on first use (idempotent
    across runs); pip or Maven failing fails the tests, never skips."""
    return ensure_reader(settings)


@pytest.fixture(scope="session")
def spark41(spark_reader) -> Iterator[ReaderSession]:
    """One Spark 4.1 process for every Iceberg read of a pytest process (a worker's modules share it: Spark
    starts once); each read has a Spark session of its own. Ended, its JVM with it, with the process."""
    with spark_reader.session() as session:
        yield session
