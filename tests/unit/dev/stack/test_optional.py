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


def test_the_spark_connect_server_is_a_warm_one(tmp_path, monkeypatch):
    """Spark's own SparkConnectServer isolates every session, and Spark 4.3 then keeps each session's worker
    daemon and idle workers until it stops (SPARK-54055): ~440 MiB a run. The stack's server is Spark
    Connect's plugin in a driver of its own, artifact isolation off: one worker factory for all sessions,
    its daemon importing eosflow's task modules, the daemon and workers kept at Spark's defaults."""
    import dataclasses

    from eosflow_dev.stack import settings as settings_mod
    from eosflow_dev.stack.spark_connect import DRIVER, SparkConnectService

    settings = dataclasses.replace(settings_mod.load(), state_dir=tmp_path)
    command = SparkConnectService(settings).command()
    confs = {command[i + 1] for i, arg in enumerate(command) if arg == "--conf"}
    assert {
        "spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.sql.artifact.isolation.enabled=false",
        "spark.python.daemon.module=eosflow.spark.worker_daemon",
    } <= confs
    assert not any(c.startswith(("spark.python.use.daemon=", "spark.python.worker.reuse=")) for c in confs)
    assert "--class" not in command and command[-1] == str(DRIVER)


def test_a_warm_server_running_other_code_is_restarted_and_an_isolating_one_is_not(tmp_path, monkeypatch):
    """A warm server's workers run the installed eosflow: after the working tree changed, every run on it
    would be refused (ServerCodeError), so starting it restarts it. An isolating server gets each run's
    code and is left running."""
    import dataclasses

    from eosflow.spark import code_archive
    from eosflow_dev.stack import settings as settings_mod
    from eosflow_dev.stack.jvm_service import JvmService
    from eosflow_dev.stack.spark_connect import IsolatingSparkConnectService, SparkConnectService

    settings = dataclasses.replace(settings_mod.load(), state_dir=tmp_path)
    monkeypatch.setattr(code_archive, "code_digest", lambda source=None: "new")
    monkeypatch.setattr(JvmService, "_start", lambda self, log: None)  # the real start: not here
    monkeypatch.setattr(JvmService, "pid", lambda self: 42)  # it runs
    stopped: list[str] = []
    for kind, restarted in ((SparkConnectService, True), (IsolatingSparkConnectService, False)):
        stopped.clear()
        monkeypatch.setattr(kind, "stop", lambda self, log=print: stopped.append(self.name))
        server = kind(settings)
        server.home.mkdir(parents=True)
        (server.home / "code").write_text("old")
        server.start(log=lambda m: None)
        assert bool(stopped) is restarted, kind
        assert (server.home / "code").read_text() == "new"
        stopped.clear()
        server.start(log=lambda m: None)  # now its code is ours: left running
        assert stopped == []
