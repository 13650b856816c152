import pytest

from eosflow.schema.avro import RegistryConfig
from tests.integration.ingest_case import IngestCase


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
