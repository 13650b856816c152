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


def test_the_spark_connect_server_keeps_no_python_worker_of_a_session(tmp_path, monkeypatch):
    """Spark 4.3 keeps each session's worker daemon and idle workers until it stops (SPARK-54055): ~440 MiB
    a run on the stack's server. Without the daemon and worker reuse, a task's worker ends with the task."""
    import dataclasses

    from eosflow_dev.stack import settings as settings_mod
    from eosflow_dev.stack.spark_connect import SparkConnectService

    settings = dataclasses.replace(settings_mod.load(), state_dir=tmp_path)
    command = SparkConnectService(settings).command()
    confs = {command[i + 1] for i, arg in enumerate(command) if arg == "--conf"}
    assert {"spark.python.use.daemon=false", "spark.python.worker.reuse=false"} <= confs
