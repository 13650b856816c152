"""Ending a run's Spark Connect session (eosflow.spark.connect.close): the server is asked once, not
retried. A server that is gone has nothing to release (the session died with it); retrying its release as
a run's actions are retried made a run on a SIGKILLed server fail after two retry budgets, 27.6 s instead
of 13.6 s (tests/integration/test_spark_connect.py's kill test, measured on 2 cores)."""

from __future__ import annotations

import os

import pytest

from eosflow.spark import connect


class _Client:
    def __init__(self) -> None:
        self.policies: list = []

    def set_retry_policies(self, policies: list) -> None:
        self.policies = policies


class _Session:
    """What close touches of pyspark's remote SparkSession: its client's retry policies and stop()."""

    def __init__(self) -> None:
        self.client = _Client()
        self.retries_at_stop: list[int | None] | None = None

    def stop(self) -> None:
        self.retries_at_stop = [p.max_retries for p in self.client.policies]
        raise ConnectionError("StatusCode.UNAVAILABLE")  # the server is gone


def test_a_session_is_ended_with_one_attempt_and_the_process_leaves_connect_mode(monkeypatch) -> None:
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    session = _Session()
    with pytest.raises(ConnectionError):  # whatever stop() raises, the process leaves Connect mode
        connect.close(session)  # type: ignore[arg-type]
    assert session.retries_at_stop == [0]
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
