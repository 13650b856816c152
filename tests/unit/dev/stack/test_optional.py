"""Which optional stack servers were asked for, and how status counts one that was not."""

from __future__ import annotations

import pytest

from eosflow.errors import StackError
from eosflow_dev.stack import ServiceStatus, optional


def test_with_takes_repeats_comma_lists_and_the_environment_in_start_order(monkeypatch):
    monkeypatch.delenv(optional.WITH_ENV, raising=False)
    assert optional.requested([]) == []
    # The S3 server first: the REST catalog may keep its warehouse there.
    assert optional.requested(["iceberg-rest", "s3"]) == ["s3", "iceberg-rest"]
    assert optional.requested(["iceberg-rest, s3,"]) == ["s3", "iceberg-rest"]
    monkeypatch.setenv(optional.WITH_ENV, "s3")
    assert optional.requested(["s3"]) == ["s3"]
    assert optional.requested([]) == ["s3"]


def test_an_unknown_name_is_refused_with_the_known_ones(monkeypatch):
    monkeypatch.setenv(optional.WITH_ENV, "minio")
    with pytest.raises(StackError, match=r"service minio .*EOSFLOW_STACK_WITH.*s3, iceberg-rest"):
        optional.requested(["s3"])


def test_an_optional_server_not_started_is_fine_a_required_one_is_not():
    assert ServiceStatus("s3", None, False, "", optional=True).ok
    assert ServiceStatus("s3", None, False, "", optional=True).state == "not started"
    assert not ServiceStatus("s3", 42, False, "", optional=True).ok  # started, not answering
    assert not ServiceStatus("kafka", None, False, "").ok
    assert ServiceStatus("kafka", None, False, "").state == "stopped"
