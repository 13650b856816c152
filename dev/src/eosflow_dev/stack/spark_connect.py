"""Spark 4.3's own Spark Connect server for the stack, started only when asked
(`eosflow stack up --with spark-connect`): the warm Spark runs send their Spark work to (DESIGN.md, "A warm
Spark"; `EOSFLOW_SPARK_REMOTE=sc://127.0.0.1:15002`).

It is pyspark's own: `org.apache.spark.sql.connect.service.SparkConnectServer` from the pyspark wheel's jars
(`spark-connect_2.13-4.3.0.jar`), started through its spark-submit as `sbin/start-connect-server.sh` does, in
local mode on two cores, listening on 127.0.0.1 only (EOSFLOW_SPARK_CONNECT_PORT). Its Python workers run
this virtualenv's interpreter, so eosflow's dependencies are there; each run adds its own code as a session
artifact. No jar to fetch: eosflow's tasks read Kafka with librdkafka.
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
MAIN = "org.apache.spark.sql.connect.service.SparkConnectServer"
NO_PYTHON_WORKER_KEPT = {"spark.python.use.daemon": "false", "spark.python.worker.reuse": "false"}


def port() -> int:
    raw = os.environ.get(PORT_ENV, "").strip()
    if not raw:
        return DEFAULT_PORT
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{PORT_ENV}={raw!r} is not a port number; set it to one, or unset it") from None


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkConnectService(JvmService):
    name = "spark-connect"
    title = "the Spark Connect server"
    main = MAIN
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
            # Spark 4.3 keeps each session's Python worker daemon and its idle workers until the server
            # stops (SPARK-54055): ~440 MiB a run, 907 -> 9,242 MiB over 20 runs here. Without the daemon and
            # worker reuse a task's Python worker ends with the task (DESIGN.md "A warm Spark").
            **NO_PYTHON_WORKER_KEPT,
        }
        args = [str(spark_home() / "bin" / "spark-submit"), "--class", self.main, "--master", "local[2]"]
        for key, value in [*confs.items(), ("spark.eosflow.state", str(self.home))]:
            args += ["--conf", f"{key}={value}"]
        return [*args, "--name", "eosflow Spark Connect server"]

    def reset(self) -> None:
        """It keeps no state between starts (sessions live in its memory): only its scratch folder goes."""
        import shutil

        shutil.rmtree(self.home / "tmp", ignore_errors=True)

    def configure(self, log) -> dict[str, str]:
        (self.home / "tmp").mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=sys.executable)
        env.pop("SPARK_CONF_DIR", None)  # the user's Spark configuration is not the stack's
        return env
