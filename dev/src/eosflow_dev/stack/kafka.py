"""A single-node Apache Kafka 4.2 in KRaft mode (combined broker and controller), from Maven jars."""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import uuid
from pathlib import Path

from eosflow.errors import StackError
from eosflow_dev.runtime import jars, prereqs
from eosflow_dev.stack import process, secret_files
from eosflow_dev.stack.settings import StackSettings

START_TIMEOUT_S = 90.0

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
"""


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64, as Kafka's own `random-uuid` makes it.

    Like Kafka's Uuid.randomUuid(), never one starting with "-": command-line parsers (StorageTool's
    among them) read that as an option. One id in 64 would, so a test start failed now and then.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def format_command(settings: StackSettings, log4j: Path, config: Path, cluster_id: str) -> list[str]:
    """Kafka's StorageTool formatting one node's log dirs for a KRaft cluster id."""
    return [
        prereqs.java(),
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        jars.classpath(settings, "kafka"),
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(config),
        "-g",
    ]


def quiet_logger(name: str = "eosflow.kafka.probe") -> logging.Logger:
    """A sink for librdkafka's own log lines where refusals are expected (start-up probes, killed nodes)."""
    quiet = logging.getLogger(name)
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
    return quiet


class KafkaService:
    name = "kafka"

    def __init__(self, settings: StackSettings) -> None:
        self.s = settings
        self.home = settings.state_dir / "kafka"
        self.data_dir = self.home / "data"
        self.config = self.home / "server.properties"
        self.log4j = self.home / "log4j2.properties"
        self.log_path = self.home / "kafka.log"
        self.pid_file = self.home / "kafka.pid"

    # -- what `status` shows ----------------------------------------------------------------
    def ports(self) -> dict[str, int]:
        ports = {
            "EOSFLOW_KAFKA_PORT": self.s.kafka_port,
            "EOSFLOW_KAFKA_CONTROLLER_PORT": self.s.kafka_controller_port,
        }
        # Only what the broker binds: the proxy port (EOSFLOW_KAFKA_PROXY_PORT) is toxiproxy's.
        if self.s.kafka_proxied_port:
            ports["EOSFLOW_KAFKA_PROXIED_PORT"] = self.s.kafka_proxied_port
        if self.s.kafka_sasl_port:
            ports["EOSFLOW_KAFKA_SASL_PORT"] = self.s.kafka_sasl_port
        return ports

    def endpoint(self) -> str:
        return f"bootstrap {self.s.stack_bootstrap_servers}"

    def pid(self) -> int | None:
        return process.owned_pid(self.pid_file, str(self.config))

    def healthy(self, timeout: float = 3.0) -> bool:
        """A real metadata request against the broker."""
        import socket

        from confluent_kafka.admin import AdminClient

        # A closed port answers at once; only ask for metadata once something listens, so
        # librdkafka does not print a connection error per retry while the broker boots.
        try:
            socket.create_connection((self.s.kafka_host, self.s.kafka_port), timeout=1).close()
        except OSError:
            return False
        try:
            admin = AdminClient(
                {
                    "bootstrap.servers": self.s.stack_bootstrap_servers,
                    "socket.timeout.ms": 2000,
                    "logger": quiet_logger(),
                }
            )
            meta = admin.list_topics(timeout=timeout)
        except Exception:
            return False
        return bool(meta.brokers)

    # -- lifecycle ------------------------------------------------------------------------------
    def prepare(self, log=print) -> None:
        prereqs.java()
        jars.fetch(self.s, "kafka", log=log)

    def start(self, log=print) -> None:
        if self.pid() is not None:
            if not self.healthy():
                self._wait_healthy(self.pid())
            return
        process.require_free_ports("kafka", self.s.kafka_host, self.ports())
        self.write_config()
        if not (self.data_dir / "meta.properties").exists():
            self._format(log)
        log(f"starting kafka on {self.s.stack_bootstrap_servers} (log: {self.log_path})")
        with self.log_path.open("ab") as out:
            proc = subprocess.Popen(
                [
                    prereqs.java(),
                    "-Xms256m",
                    "-Xmx1g",
                    "-XX:+UseG1GC",
                    f"-Dlog4j2.configurationFile={self.log4j}",
                    "-cp",
                    jars.classpath(self.s, "kafka"),
                    "kafka.Kafka",
                    str(self.config),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        self._wait_healthy(proc.pid, proc)
        self._wait_transactions_ready()

    def write_config(self) -> None:
        """server.properties (it holds the SASL listener's password) and the log configuration."""
        self.home.mkdir(parents=True, exist_ok=True)
        secret_files.write_secret(self.config, self._server_properties())
        self.log4j.write_text(LOG4J2)

    def stop(self, log=print) -> None:
        pid = self.pid()
        if pid is None:
            return
        log(f"stopping kafka (pid {pid})")
        process.stop_pid(pid)
        self.pid_file.unlink(missing_ok=True)

    def reset(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)

    # -- internals ----------------------------------------------------------------------------------
    def _wait_healthy(self, pid: int, proc: subprocess.Popen | None = None) -> None:
        def died() -> str | None:
            alive = proc.poll() is None if proc is not None else process.pid_alive(pid)
            if alive:
                return None
            return (
                f"kafka exited during start-up. Last lines of {self.log_path}:\n{process.tail(self.log_path)}"
            )

        if not process.wait_until(self.healthy, START_TIMEOUT_S, interval=1.0, abort=died):
            raise StackError(
                f"kafka did not answer a metadata request within {START_TIMEOUT_S:.0f}s. "
                f"See {self.log_path}:\n{process.tail(self.log_path)}"
            )

    def _wait_transactions_ready(self) -> None:
        """init_transactions once, so the transaction coordinator is loaded before anyone needs it.

        On a fresh broker `__transaction_state` does not exist yet; without this, the first
        transactional producer of a session waits and logs COORDINATOR_NOT_AVAILABLE retries.
        """
        from confluent_kafka import KafkaException, Producer

        probe = Producer(
            {
                "bootstrap.servers": self.s.stack_bootstrap_servers,
                "logger": quiet_logger(),
                "transactional.id": "eosflow-stack-up-probe",
            }
        )
        try:
            probe.init_transactions(START_TIMEOUT_S)
        except KafkaException as exc:
            raise StackError(
                f"kafka is up but its transaction coordinator did not become available "
                f"({exc.args[0].str()}). See {self.log_path}:\n{process.tail(self.log_path)}"
            ) from exc

    def _format(self, log) -> None:
        cluster_id = new_cluster_id()
        log(f"formatting kafka storage in {self.data_dir} (cluster id {cluster_id})")
        done = subprocess.run(
            format_command(self.s, self.log4j, self.config, cluster_id), capture_output=True, text=True
        )
        if done.returncode != 0:
            raise StackError(f"formatting kafka storage failed:\n{done.stdout}{done.stderr}")

    def _server_properties(self) -> str:
        s = self.s
        # The optional PROXIED listener (EOSFLOW_KAFKA_PROXIED_PORT): the broker binds it but
        # advertises the toxiproxy port, so a client bootstrapped through the proxy is told to
        # stay behind it. Off (port 0), the file is exactly what it was without the option.
        listener = advertised = protocol = sasl = ""
        if s.kafka_proxied_port:
            listener = f",PROXIED://{s.kafka_host}:{s.kafka_proxied_port}"
            advertised = f",PROXIED://{s.kafka_host}:{s.kafka_proxy_port}"
            protocol = ",PROXIED:PLAINTEXT"
        # A listener that requires SASL/PLAIN (user eosflow), so that what a user's secured Kafka
        # needs is tested against a real broker: every client must authenticate there.
        if s.kafka_sasl_port:
            listener += f",SASL_PLAINTEXT://{s.kafka_host}:{s.kafka_sasl_port}"
            advertised += f",SASL_PLAINTEXT://{s.kafka_host}:{s.kafka_sasl_port}"
            protocol += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            password = s.kafka_sasl_password.replace("\\", "\\\\").replace('"', '\\"')
            sasl = (
                "sasl.enabled.mechanisms=PLAIN\n"
                "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security"
                f'.plain.PlainLoginModule required user_eosflow="{password}";\n'
            )
        return f"""\
# Written by `eosflow stack up`; edit the environment (EOSFLOW_KAFKA_*), not this file.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{s.kafka_host}:{s.kafka_controller_port}
listeners=PLAINTEXT://{s.kafka_host}:{s.kafka_port},CONTROLLER://{s.kafka_host}:{s.kafka_controller_port}{listener}
advertised.listeners=PLAINTEXT://{s.kafka_host}:{s.kafka_port}{advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocol}
log.dirs={self.data_dir}
num.partitions=1
auto.create.topics.enable=false
# A single broker: internal topics cannot have more than one replica, or transactions never start.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
# Short enough that a topic with a short retention.ms really loses its old segments in a test.
log.retention.check.interval.ms=5000
log.segment.delete.delay.ms=1000
# The log cleaner looks for compactable logs every second, not every 15 s: a compacted state topic's test
# waits for it (a local broker with few topics; production keeps Kafka's default).
log.cleaner.backoff.ms=1000
{sasl}"""
