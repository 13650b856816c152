"""Shared fixtures. Integration tests use the real local stack (`eosflow stack up`)."""

from __future__ import annotations

import uuid

import pytest

from eosflow import settings as settings_mod
from eosflow import stack


@pytest.fixture(scope="session")
def settings() -> settings_mod.Settings:
    return settings_mod.load()


@pytest.fixture(scope="session")
def running_stack(settings):
    """The project's stack, started if needed (idempotent) and left running for other tests."""
    stack.up(settings, log=lambda msg: None)
    return settings


@pytest.fixture(scope="session")
def spark(settings):
    """One local Spark session for the run, made exactly as the ingestion job makes it."""
    from eosflow.ingest.spark_session import get_spark

    session = get_spark(settings, "eosflow-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def topic_name(request) -> str:
    """A topic name of its own for each test, so tests never read each other's records."""
    return f"test.{request.node.name[:40].replace('[', '.').replace(']', '')}.{uuid.uuid4().hex[:8]}"
