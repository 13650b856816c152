"""Spark 4.3's own Spark Connect server for the stack, started only when asked
(`eosflow stack up --with spark-connect`): the warm Spark runs send their Spark work to (DESIGN.md, "A warm
Spark"; `EOSFLOW_SPARK_REMOTE=sc://127.0.0.1:15002`).

It is a warm server (DESIGN.md "A warm Spark": two kinds of server): Spark Connect's own plugin
(`SparkConnectPlugin`, from the pyspark wheel's `spark-connect_2.13-4.3.0.jar`) in a Spark driver started by
pyspark's spark-submit (eosflow_dev.stack.spark_connect_driver), in local mode on two cores, listening on
127.0.0.1 only (EOSFLOW_SPARK_CONNECT_PORT), with artifact isolation off, so its sessions share one Python
worker factory whose daemon (eosflow.spark.worker_daemon) and workers are kept. Its Python workers run this
virtualenv's interpreter, so the eosflow they run is the working tree's (each run checks it is its own). No
jar to fetch: eosflow's tasks read Kafka with librdkafka.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from eosflow_dev.runtime import prereqs
from eosflow_dev.stack.jvm_service import JvmService
from eosflow_dev.stack.settings import StackSettings

PORT_ENV = "EOSFLOW_SPARK_CONNECT_PORT"
DEFAULT_PORT = 15002  # Spark Connect's own default
ISOLATING_PORT_ENV = "EOSFLOW_SPARK_CONNECT_ISOLATING_PORT"
ISOLATING_DEFAULT_PORT = 15012
PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
DRIVER = Path(__file__).with_name("spark_connect_driver.py")
# One Python worker factory for every session, its daemon importing eosflow's task modules before it forks
# a worker; Spark's defaults keep the daemon and reuse its workers (DESIGN.md "A warm Spark").
WARM = {
    "spark.plugins": PLUGIN,
    "spark.sql.artifact.isolation.enabled": "false",
    "spark.python.daemon.module": "eosflow.spark.worker_daemon",
}
# What DESIGN asks of an isolating server: without them Spark 4.3 keeps every session's Python worker daemon
# and idle workers until it stops (SPARK-54055: ~440 MiB a run, 907 -> 9,242 MiB over 20 runs here).
NO_PYTHON_WORKER_KEPT = {"spark.python.use.daemon": "false", "spark.python.worker.reuse": "false"}


def port() -> int:
    return _port(PORT_ENV, os.environ.get(PORT_ENV, ""), DEFAULT_PORT)


def isolating_port() -> int:
    return _port(ISOLATING_PORT_ENV, os.environ.get(ISOLATING_PORT_ENV, ""), ISOLATING_DEFAULT_PORT)


def _port(env: str, raw: str, default: int) -> int:
    if not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{env}={raw!r} is not a port number; set it to one, or unset it") from None


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkConnectService(JvmService):
    name = "spark-connect"
    title = "the Spark Connect server"
    app_name = "eosflow Spark Connect server"
    runs_installed_code = True  # its workers run the eosflow installed here, not a run's artifact
    main = PLUGIN  # in a driver of our own (DRIVER): Spark's server class would isolate every session
    heap = "1g"
    start_timeout_s = 120.0  # a SparkContext, then the gRPC service: 10-30 s on a busy 2-core machine
    poll_s = 0.5

    def __init__(self, settings: StackSettings) -> None:
        super().__init__(settings)
        self.port = port()

    def ports(self) -> dict[str, int]:
        return {PORT_ENV: self.port}

    def endpoint(self) -> str:
        """The URL EOSFLOW_SPARK_REMOTE takes."""
        return f"sc://{self.s.kafka_host}:{self.port}"

    def describe(self) -> str:
        return self.endpoint()

    def marker(self) -> str:
        return f"spark.eosflow.state={self.home}"  # a --conf of its command line names the state folder

    def healthy(self, timeout: float = 3.0) -> bool:
        """Its gRPC port accepts a connection: the server opens it once its SparkContext is up."""
        try:
            with socket.create_connection((self.s.kafka_host, self.port), timeout=timeout):
                return True
        except OSError:
            return False

    def prepare(self, log=print) -> None:
        prereqs.java()  # its jars are pyspark's own: nothing to fetch

    def command(self) -> list[str]:
        confs = {
            "spark.connect.grpc.binding.address": self.s.kafka_host,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": self.heap,
            "spark.pyspark.python": sys.executable,
            "spark.local.dir": str(self.home / "tmp"),
            "spark.pyspark.driver.python": sys.executable,
            **self.kind_confs(),
        }
        args = [str(spark_home() / "bin" / "spark-submit"), "--master", "local[2]"]
        for key, value in [*confs.items(), ("spark.eosflow.state", str(self.home))]:
            args += ["--conf", f"{key}={value}"]
        return [*args, "--name", self.app_name, *self.application()]

    def _start(self, log) -> None:
        """Start it unless it runs (under the start lock); a warm server whose eosflow is not the working
        tree's any more is restarted first, for every run on it would be refused (ServerCodeError)."""
        from eosflow.spark.code_archive import code_digest

        code = code_digest()
        if self.runs_installed_code and self.pid() is not None and self._code() != code:
            log(f"restarting {self.title}: eosflow's code changed since it started")
            self.stop(log=log)
        super()._start(log)
        (self.home / "code").write_text(code)

    def _code(self) -> str:
        try:
            return (self.home / "code").read_text()
        except FileNotFoundError:
            return ""  # started before it recorded its code: not known to be ours

    def kind_confs(self) -> dict[str, str]:
        """What makes it the kind of server it is (DESIGN.md "A warm Spark": two kinds of server)."""
        return WARM

    def application(self) -> list[str]:
        """What spark-submit runs: the driver that holds the plugin's SparkContext."""
        return [str(DRIVER)]

    def reset(self) -> None:
        """It keeps no state between starts (sessions live in its memory): only its scratch folder goes."""
        import shutil

        shutil.rmtree(self.home / "tmp", ignore_errors=True)

    def configure(self, log) -> dict[str, str]:
        (self.home / "tmp").mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=sys.executable)
        env.pop("SPARK_CONF_DIR", None)  # the user's Spark configuration is not the stack's
        return env


class IsolatingSparkConnectService(SparkConnectService):
    """Spark's own `SparkConnectServer`, as `sbin/start-connect-server.sh` starts it (artifact isolation
    always on, as on a managed server), with the two settings DESIGN asks of such a server: the tests'
    server for the path where a run ships its code as a session artifact (`eosflow stack up --with
    spark-connect-isolating`)."""

    name = "spark-connect-isolating"
    runs_installed_code = False  # each run ships its code
    title = "the isolating Spark Connect server"
    app_name = "eosflow isolating Spark Connect server"
    main = "org.apache.spark.sql.connect.service.SparkConnectServer"

    def __init__(self, settings: StackSettings) -> None:
        super().__init__(settings)
        self.port = isolating_port()

    def ports(self) -> dict[str, int]:
        return {ISOLATING_PORT_ENV: self.port}

    def kind_confs(self) -> dict[str, str]:
        return NO_PYTHON_WORKER_KEPT

    def application(self) -> list[str]:
        return ["--class", self.main]
