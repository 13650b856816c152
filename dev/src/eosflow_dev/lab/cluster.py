"""A three-node Apache Kafka 4.2 KRaft cluster from the project's jars, built to be hurt on purpose.

Every node is a combined broker and controller, so killing a partition leader can also take the
active controller with it, as in a small real cluster. The lab needs processes it can SIGKILL,
SIGSTOP and SIGCONT one at a time, which is why this is plain JVMs and not containers.

Node i (1..n) listens for clients on base_port + 2*(i-1) and for the quorum on the port after it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from eosflow.errors import StackError
from eosflow_dev.runtime import jars, prereqs
from eosflow_dev.stack import process
from eosflow_dev.stack.kafka import LOG4J2, format_command, new_cluster_id, quiet_logger
from eosflow_dev.stack.settings import StackSettings

START_TIMEOUT_S = 150.0  # three JVMs booting at once on two cores
STOP_TIMEOUT_S = 30.0
QUORUM_LOST_GRACE_S = 3.0  # for the last nodes to exit once too few voters are left to ack a shutdown
SESSION_TIMEOUT_MS = 6000  # how long the controller waits before fencing a silent broker
METADATA_WAIT_S = 30.0  # a broker just (re)started may not know a topic yet
HEARTBEAT_MS = 1000
# The client JIT only (C1), for the nodes and their storage formatting: these JVMs live a minute or two and
# carry a few thousand records, so C2's compilations never pay back. Measured on two loaded cores: a
# three-node start (format included) 33-39 CPU-s -> 19-21, up in 16-20 s instead of 39, failover unchanged.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)


@dataclass(frozen=True)
class PartitionState:
    leader: int  # -1 while the partition has no leader
    replicas: list[int]
    isr: list[int]


class KraftCluster:
    """n combined broker+controller nodes sharing one cluster id, under one home directory."""

    def __init__(
        self,
        home: Path,
        settings: StackSettings,
        host: str = "127.0.0.1",
        base_port: int = 19300,
        nodes: int = 3,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, not {nodes}")
        self.home = Path(home)
        self.s = settings
        self.host = host
        self.base_port = base_port
        self.nodes = list(range(1, nodes + 1))
        self.log4j = self.home / "log4j2.properties"
        self.cluster_id_file = self.home / "cluster.id"
        # Popen handles of the JVMs this object started, so killed ones are reaped, not left as zombies.
        self._procs: dict[int, subprocess.Popen] = {}

    # -- addresses ------------------------------------------------------------------------------------
    def broker_port(self, node: int) -> int:
        self._check(node)
        return self.base_port + 2 * (node - 1)

    def controller_port(self, node: int) -> int:
        return self.broker_port(node) + 1

    @property
    def bootstrap_servers(self) -> str:
        return self.bootstrap_of(self.nodes)

    def bootstrap_of(self, nodes: Iterable[int]) -> str:
        chosen = sorted(set(nodes))
        if not chosen:
            raise ValueError("bootstrap_of needs at least one node")
        return ",".join(f"{self.host}:{self.broker_port(n)}" for n in chosen)

    def node_dir(self, node: int) -> Path:
        self._check(node)
        return self.home / f"node-{node}"

    def log_path(self, node: int) -> Path:
        return self.node_dir(node) / "kafka.log"

    def _config(self, node: int) -> Path:
        return self.node_dir(node) / "server.properties"

    def _pid_file(self, node: int) -> Path:
        return self.node_dir(node) / "kafka.pid"

    def _data_dir(self, node: int) -> Path:
        return self.node_dir(node) / "data"

    # -- processes ---------------------------------------------------------------------------------
    def pid(self, node: int) -> int | None:
        """The node's JVM pid while it lives (a paused JVM counts as alive)."""
        proc = self._procs.get(node)
        if proc is not None:
            if proc.poll() is None:
                # Ours: no need to read /proc/<pid>/cmdline, which is briefly unreadable or
                # different while the java launcher starts (a start-up check once saw it and
                # reported a healthy node as dead).
                return proc.pid
            del self._procs[node]  # reaped
        return process.owned_pid(self._pid_file(node), str(self._config(node)))

    def running(self) -> list[int]:
        return [n for n in self.nodes if self.pid(n) is not None]

    def kill(self, node: int) -> None:
        """SIGKILL: no controlled shutdown, as a crashed process dies (the OS page cache survives)."""
        pid = self._require_pid(node)
        os.kill(pid, signal.SIGKILL)
        self._reap(node, pid, timeout=10.0)
        if process.pid_alive(pid):
            raise StackError(f"node {node} (pid {pid}) is still alive 10s after SIGKILL")
        self._pid_file(node).unlink(missing_ok=True)

    def pause(self, node: int) -> None:
        """SIGSTOP: the JVM keeps its sockets open but answers nothing, like a long GC pause."""
        pid = self._require_pid(node)
        os.kill(pid, signal.SIGSTOP)
        # Every thread of the JVM must stop; the kernel reports the process stopped once they have.
        if not process.wait_until(lambda: self.is_paused(node), 5.0, interval=0.02):
            raise StackError(f"node {node} (pid {pid}) did not stop within 5s of SIGSTOP")

    def resume(self, node: int) -> None:
        pid = self._require_pid(node)
        os.kill(pid, signal.SIGCONT)
        if not process.wait_until(lambda: not self.is_paused(node), 5.0, interval=0.02):
            raise StackError(f"node {node} (pid {pid}) did not resume within 5s of SIGCONT")

    def is_paused(self, node: int) -> bool:
        pid = self.pid(node)
        if pid is None:
            return False
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state in ("T", "t")

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self, log=print, wait: bool = True) -> None:
        """Start every node that is not running and wait until all are registered brokers.

        Idempotent: a running cluster is left alone, a node killed earlier is started again. All
        nodes are formatted with one cluster id (kept in home/cluster.id), the first time only.
        wait=False: launch them and return; a later start() waits for them.
        """
        prereqs.java()
        jars.fetch(self.s, "kafka", log=log)
        to_start = [n for n in self.nodes if self.pid(n) is None]
        if to_start:
            self._require_free_ports(to_start)
            self.home.mkdir(parents=True, exist_ok=True)
            self.log4j.write_text(LOG4J2)
            cluster_id = self._cluster_id()
            started = time.monotonic()
            self._format([self._prepare_node(n) for n in to_start], cluster_id, log)
            # All at once: a controller alone cannot win an election, so nodes started one by one
            # would each wait for the others anyway.
            for node in to_start:
                self._launch(node, log)
            if not wait:
                return
            self._wait_registered(self.nodes, START_TIMEOUT_S)
            log(f"kafka cluster up on {self.bootstrap_servers} in {time.monotonic() - started:.1f}s")
        elif wait:
            self._wait_registered(self.nodes, START_TIMEOUT_S)

    def start_node(self, node: int, log=print) -> None:
        """Start one node (e.g. the one killed) and wait until it is a registered broker again."""
        if self.pid(node) is not None:
            self._wait_registered([node], START_TIMEOUT_S)
            return
        self._require_free_ports([node])
        self.home.mkdir(parents=True, exist_ok=True)
        self.log4j.write_text(LOG4J2)
        started = time.monotonic()
        self._format([self._prepare_node(node)], self._cluster_id(), log)
        self._launch(node, log)
        self._wait_registered([node], START_TIMEOUT_S)
        log(f"kafka node {node} up in {time.monotonic() - started:.1f}s")

    def stop(self, log=print) -> None:
        """SIGTERM every node this cluster runs (resumed first if paused); SIGKILL what cannot finish.

        A KRaft broker's controlled shutdown needs a controller quorum. All nodes are signalled
        together, and once fewer than a majority of voters is left alive, the rest can never finish
        (they retry until killed), so they get QUORUM_LOST_GRACE_S and then SIGKILL. Nothing is
        removed; the next start() recovers the logs.
        """
        pids = {n: pid for n in self.nodes if (pid := self.pid(n)) is not None}
        if not pids:
            return
        log(f"stopping kafka nodes {sorted(pids)} (pids {sorted(pids.values())})")
        for pid in pids.values():
            for sig in (signal.SIGCONT, signal.SIGTERM):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, sig)
        majority = len(self.nodes) // 2 + 1
        deadline = time.monotonic() + STOP_TIMEOUT_S
        quorum_lost_at: float | None = None
        while True:
            alive = {n: pid for n, pid in pids.items() if self._alive(n, pid)}
            now = time.monotonic()
            if not alive:
                break
            if quorum_lost_at is None and len(alive) < majority:
                quorum_lost_at = now
            hopeless = quorum_lost_at is not None and now - quorum_lost_at >= QUORUM_LOST_GRACE_S
            if now >= deadline or hopeless:
                self._kill_all(alive)
                break
            time.sleep(0.2)
        for node in pids:
            self._pid_file(node).unlink(missing_ok=True)

    def wipe(self) -> None:
        """SIGKILL every node (no point shutting down cleanly what is deleted next), delete home."""
        pids = {n: pid for n in self.nodes if (pid := self.pid(n)) is not None}
        self._kill_all(pids)
        shutil.rmtree(self.home, ignore_errors=True)

    # -- topics and metadata -----------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication: int = 3,
        min_insync: int = 2,
        assignment: list[list[int]] | None = None,
    ) -> None:
        """Create a topic and wait until every partition has a leader and its full replica set in sync.

        `assignment` (one replica list per partition, preferred leader first) pins where the
        replicas go, overriding partitions and replication.
        """
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        config = {
            "min.insync.replicas": str(min_insync),
            "unclean.leader.election.enable": "false",
        }
        if assignment is not None:
            new = NewTopic(name, len(assignment), -1, replica_assignment=assignment, config=config)
            partitions, replication = len(assignment), len(assignment[0])
        else:
            new = NewTopic(name, partitions, replication, config=config)
        admin = self._admin()  # held until the future resolves: a collected client fails it with _DESTROY
        futures = admin.create_topics([new])
        try:
            futures[name].result(timeout=60)
        except KafkaException as exc:
            raise StackError(f"could not create topic {name!r}: {exc.args[0].str()}") from exc

        def ready() -> bool:
            states = [self._partition(name, p) for p in range(partitions)]
            return all(s is not None and s.leader >= 0 and len(s.isr) == replication for s in states)

        if not process.wait_until(ready, 60.0, interval=0.3):
            raise StackError(f"topic {name!r} was created but its partitions did not get a full ISR in 60s")

    def partition(self, topic: str, partition: int = 0, bootstrap: str | None = None) -> PartitionState:
        """The partition as the cluster's metadata has it. A broker just (re)started can answer without the
        topic for a while, so that answer is asked again for up to METADATA_WAIT_S: on a loaded machine the
        leader-failure trial found no metadata right after create_topic had seen the partition."""
        found: list[PartitionState] = []

        def known() -> bool:
            state = self._partition(topic, partition, bootstrap)
            found[:] = [state] if state is not None else []
            return bool(found)

        state = found[0] if process.wait_until(known, METADATA_WAIT_S, interval=0.3) else None
        if state is None:
            asked = bootstrap or self.bootstrap_servers
            raise StackError(f"no metadata for {topic}[{partition}] from {asked}")
        return state

    def leader(self, topic: str, partition: int = 0, bootstrap: str | None = None) -> int:
        state = self.partition(topic, partition, bootstrap)
        if state.leader < 0:
            raise StackError(f"{topic}[{partition}] has no leader right now (isr {state.isr})")
        return state.leader

    def isr(self, topic: str, partition: int = 0, bootstrap: str | None = None) -> list[int]:
        return self.partition(topic, partition, bootstrap).isr

    def high_watermark(self, topic: str, partition: int = 0, bootstrap: str | None = None) -> int:
        """The partition's high watermark from its leader: the offset every ISR member has reached.

        -1 when the leader cannot be asked right now.
        """
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap or self.bootstrap_servers,
                "group.id": "eosflow-lab-watermarks",  # required by the client, never joined
                "logger": quiet_logger("eosflow_dev.lab.cluster.client"),
            }
        )
        try:
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=5, cached=False
            )
        except Exception:
            return -1
        finally:
            consumer.close()
        return high

    def wait_new_leader(self, topic: str, partition: int, not_node: int, timeout_s: float = 60) -> int:
        """Poll the other nodes' metadata until the partition is led by a node other than not_node."""
        others = self.bootstrap_of(n for n in self.nodes if n != not_node)
        found: list[int] = []

        def elected() -> bool:
            state = self._partition(topic, partition, others)
            if state is not None and state.leader >= 0 and state.leader != not_node:
                found.append(state.leader)
                return True
            return False

        if not process.wait_until(elected, timeout_s, interval=0.2):
            last = self._partition(topic, partition, others)
            raise StackError(
                f"{topic}[{partition}] got no leader other than node {not_node} within {timeout_s:.0f}s "
                f"(last metadata: {last}). See the logs under {self.home}"
            )
        return found[-1]

    def brokers(self, bootstrap: str | None = None) -> list[int]:
        """Registered (unfenced) brokers, as the metadata answer lists them."""
        try:
            meta = self._admin(bootstrap).list_topics(timeout=5)
        except Exception:
            return []
        return sorted(meta.brokers)

    # -- internals -------------------------------------------------------------------------------------
    def _check(self, node: int) -> None:
        if node not in self.nodes:
            raise ValueError(f"no node {node}: this cluster has nodes {self.nodes}")

    def _require_pid(self, node: int) -> int:
        pid = self.pid(node)
        if pid is None:
            raise StackError(f"kafka node {node} is not running")
        return pid

    def _alive(self, node: int, pid: int) -> bool:
        proc = self._procs.get(node)
        if proc is not None and proc.pid == pid:
            return proc.poll() is None  # also reaps it
        return process.pid_alive(pid)

    def _kill_all(self, pids: dict[int, int]) -> None:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        for node, pid in pids.items():
            self._reap(node, pid, timeout=10.0)
            self._pid_file(node).unlink(missing_ok=True)

    def _reap(self, node: int, pid: int, timeout: float) -> None:
        proc = self._procs.get(node)
        if proc is not None and proc.pid == pid:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return
            del self._procs[node]
        else:
            process.wait_until(lambda: not process.pid_alive(pid), timeout, interval=0.1)

    def _admin(self, bootstrap: str | None = None):
        from confluent_kafka.admin import AdminClient

        return AdminClient(
            {
                "bootstrap.servers": bootstrap or self.bootstrap_servers,
                "socket.timeout.ms": 3000,
                "logger": quiet_logger("eosflow_dev.lab.cluster.client"),
            }
        )

    def _partition(self, topic: str, partition: int, bootstrap: str | None = None) -> PartitionState | None:
        try:
            meta = self._admin(bootstrap).list_topics(topic=topic, timeout=5)
        except Exception:
            return None
        info = meta.topics.get(topic)
        if info is None or info.error is not None or partition not in info.partitions:
            return None
        p = info.partitions[partition]
        return PartitionState(leader=p.leader, replicas=list(p.replicas), isr=list(p.isrs))

    def _require_free_ports(self, nodes: list[int]) -> None:
        ports: dict[str, int] = {}
        for n in nodes:
            ports[f"node {n} broker"] = self.broker_port(n)
            ports[f"node {n} controller"] = self.controller_port(n)
        busy = [
            f"{name} port {port}" for name, port in ports.items() if not process.port_is_free(self.host, port)
        ]
        if busy:
            raise StackError(
                f"kafka lab cluster: {', '.join(busy)} on {self.host} already in use by another process. "
                f"Stop it, or give KraftCluster another base_port."
            )

    def _cluster_id(self) -> str:
        if self.cluster_id_file.exists():
            return self.cluster_id_file.read_text().strip()
        cluster_id = new_cluster_id()
        self.cluster_id_file.write_text(cluster_id + "\n")
        return cluster_id

    def _prepare_node(self, node: int) -> int | None:
        """Write the node's config; return the node if its storage still needs formatting."""
        self.node_dir(node).mkdir(parents=True, exist_ok=True)
        self._config(node).write_text(self._server_properties(node))
        return None if (self._data_dir(node) / "meta.properties").exists() else node

    def _format(self, nodes: list[int | None], cluster_id: str, log) -> None:
        """Format the storage of these nodes with one cluster id, in parallel (one JVM each, ~4s)."""
        todo = [n for n in nodes if n is not None]
        runs = {
            n: subprocess.Popen(
                _with_jvm_options(format_command(self.s, self.log4j, self._config(n), cluster_id)),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for n in todo
        }
        failed = []
        for n, run in runs.items():
            out, _ = run.communicate()
            if run.returncode != 0:
                failed.append(f"node {n} (exit {run.returncode}):\n{out}")
        if failed:
            raise StackError("formatting kafka storage failed for " + "\n".join(failed))
        if todo:
            log(f"formatted kafka nodes {todo} under {self.home} (cluster id {cluster_id})")

    def _launch(self, node: int, log) -> None:
        log(f"starting kafka node {node} on port {self.broker_port(node)} (log: {self.log_path(node)})")
        with self.log_path(node).open("ab") as out:
            proc = subprocess.Popen(
                [
                    prereqs.java(),
                    *JVM_OPTIONS,
                    "-Xms128m",
                    "-Xmx512m",
                    "-XX:+UseG1GC",
                    f"-Dlog4j2.configurationFile={self.log4j}",
                    "-cp",
                    jars.classpath(self.s, "kafka"),
                    "kafka.Kafka",
                    str(self._config(node)),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() signals the group
            )
        self._procs[node] = proc
        self._pid_file(node).write_text(f"{proc.pid}\n")

    def _wait_registered(self, nodes: list[int], timeout: float) -> None:
        def died() -> str | None:
            for n in nodes:
                if self.pid(n) is None:
                    return f"kafka node {n} exited during start-up. Last lines of {self.log_path(n)}:\n" + (
                        process.tail(self.log_path(n))
                    )
            return None

        def registered() -> bool:
            if not _listening(self.host, self.broker_port(nodes[0])):
                return False
            return set(nodes) <= set(self.brokers(self.bootstrap_of(nodes)))

        if not process.wait_until(registered, timeout, interval=1.0, abort=died):
            missing = sorted(set(nodes) - set(self.brokers()))
            n = missing[0] if missing else nodes[0]
            raise StackError(
                f"kafka nodes {missing or nodes} did not register as brokers within {timeout:.0f}s. "
                f"Last lines of {self.log_path(n)}:\n{process.tail(self.log_path(n))}"
            )

    def _server_properties(self, node: int) -> str:
        voters = ",".join(f"{n}@{self.host}:{self.controller_port(n)}" for n in self.nodes)
        rf = min(3, len(self.nodes))
        min_isr = min(2, rf)
        return f"""\
# Written by eosflow_dev.lab.cluster for the delivery-guarantee lab; rewritten at every start.
process.roles=broker,controller
node.id={node}
controller.quorum.voters={voters}
listeners=PLAINTEXT://{self.host}:{self.broker_port(node)},CONTROLLER://{self.host}:{self.controller_port(node)}
advertised.listeners=PLAINTEXT://{self.host}:{self.broker_port(node)}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={self._data_dir(node)}
num.partitions=1
auto.create.topics.enable=false
default.replication.factor={rf}
min.insync.replicas={min_isr}
offsets.topic.replication.factor={rf}
offsets.topic.num.partitions=10
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions=10
# Losing acknowledged data must come from acks, never from electing an out-of-sync replica.
unclean.leader.election.enable=false
# Leadership moves only when the lab makes it move.
auto.leader.rebalance.enable=false
group.initial.rebalance.delay.ms=0
# A dead node is fenced (and its partitions get new leaders) after seconds, not Kafka's 9s default...
broker.session.timeout.ms={SESSION_TIMEOUT_MS}
broker.heartbeat.interval.ms={HEARTBEAT_MS}
# ...while a follower paused for a few seconds stays in the ISR (the leader drops it after this long).
replica.lag.time.max.ms=30000
# Two cores for three brokers: fewer threads.
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
background.threads=2
log.retention.check.interval.ms=5000
"""


def _with_jvm_options(command: list[str]) -> list[str]:
    """A `java ...` command with JVM_OPTIONS right after the java binary."""
    return [command[0], *JVM_OPTIONS, *command[1:]]


def _listening(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True
