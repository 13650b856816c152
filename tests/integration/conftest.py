import pytest

from tests.integration.ingest_case import IngestCase


@pytest.fixture
def case(running_stack, tmp_path, monkeypatch) -> IngestCase:
    """A pipeline of its own (topic, target table, pipelines file) for one test."""
    c = IngestCase(running_stack, tmp_path / "pipelines.yml")
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(c.config_path))
    return c
