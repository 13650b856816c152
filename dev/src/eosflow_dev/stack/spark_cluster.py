"""A Spark standalone cluster on this machine: a master and workers started with pyspark's own `spark-class`.

For running the same ingestion job, unchanged, on a cluster instead of `local[2]`: point
EOSFLOW_SPARK_MASTER at `spark://127.0.0.1:<port>` (`eosflow spark-cluster up` prints it). Executors
run in the workers' JVMs and start Python workers with this interpreter (spark.pyspark.python, set by
eosflow.spark.session), so eosflow and its dependencies come from the same venv; the connector
jars travel from the driver (spark.jars).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from eosflow.errors import StackError
from eosflow_dev.runtime import prereqs
from eosflow_dev.stack import process
from eosflow_dev.stack.settings import StackSettings

START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class ClusterPorts:
    master: int = 17077
    master_ui: int = 18090  # not 8080: Airflow's
    first_worker_ui: int = 18091


class SparkCluster:
    """One master and `workers` workers of `cores` cores each, under `home` (pid files, logs, work dirs)."""

    def __init__(
        self,
        settings: StackSettings,
        home: Path | None = None,
        ports: ClusterPorts = ClusterPorts(),
        workers: int = 2,
        cores: int = 1,
        memory: str = "2g",
    ) -> None:
        self.s = settings
        self.home = Path(home or settings.state_dir / "spark-cluster")
        self.ports, self.workers, self.cores, self.memory = ports, workers, cores, memory
        self.host = settings.kafka_host

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.ports.master}"

    def _spark_class(self) -> str:
        import pyspark

        found = Path(pyspark.__file__).parent / "bin" / "spark-class"
        if not found.exists():
            raise StackError(f"pyspark has no bin/spark-class at {found}; reinstall pyspark (make setup)")
        return str(found)

    def _env(self) -> dict[str, str]:
        import pyspark

        return {
            **os.environ,
            "SPARK_HOME": str(Path(pyspark.__file__).parent),
            "JAVA_HOME": str(Path(prereqs.java()).resolve().parents[1]),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOG_DIR": str(self.home / "logs"),
            "SPARK_WORKER_DIR": str(self.home / "work"),
        }

    def _pid_file(self, name: str) -> Path:
        return self.home / f"{name}.pid"

    def _marker(self, name: str) -> str:
        return f"--webui-port {self._ui_port(name)}"

    def _ui_port(self, name: str) -> int:
        if name == "master":
            return self.ports.master_ui
        return self.ports.first_worker_ui + int(name.removeprefix("worker-")) - 1

    def names(self) -> list[str]:
        return ["master", *(f"worker-{i}" for i in range(1, self.workers + 1))]

    def pid(self, name: str) -> int | None:
        return process.owned_pid(self._pid_file(name), self._marker(name))

    def master_state(self) -> dict:
        """The master's state as its web UI serves it in JSON ({} when it does not answer)."""
        try:
            url = f"http://{self.host}:{self.ports.master_ui}/json/"
            with urllib.request.urlopen(url, timeout=2) as answer:
                return json.loads(answer.read())
        except (OSError, ValueError):
            return {}

    def alive_workers(self) -> int:
        return sum(1 for w in self.master_state().get("workers", []) if w.get("state") == "ALIVE")

    def completed_apps(self) -> int:
        """Applications that ran on this cluster and finished."""
        return len(self.master_state().get("completedapps", []))

    def up(self, log=print) -> str:
        """Start what is not running; return the master URL once every worker registered."""
        self.home.mkdir(parents=True, exist_ok=True)
        ports = {"master": self.ports.master, "master web UI": self.ports.master_ui}
        ports |= {f"{n} web UI": self._ui_port(n) for n in self.names()[1:]}
        if self.pid("master") is None:
            process.require_free_ports("spark-cluster", self.host, ports)
        for name in self.names():
            if self.pid(name) is None:
                self._start(name, log)
        if not process.wait_until(
            lambda: self.alive_workers() >= self.workers, START_TIMEOUT_S, interval=1.0
        ):
            raise StackError(
                f"the Spark master at {self.master_url} counts {self.alive_workers()} of {self.workers} "
                f"workers after {START_TIMEOUT_S:.0f}s; see the logs in {self.home}"
            )
        log(f"spark cluster: {self.master_url} with {self.workers} workers of {self.cores} core(s)")
        return self.master_url

    def _start(self, name: str, log) -> None:
        if name == "master":
            args = [
                "org.apache.spark.deploy.master.Master",
                "--host",
                self.host,
                "--port",
                str(self.ports.master),
            ]
        else:
            args = [
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host",
                self.host,
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(self.home / "work"),
            ]
        args += ["--webui-port", str(self._ui_port(name))]
        out_path = self.home / f"{name}.log"
        log(f"starting spark {name} (log: {out_path})")
        with out_path.open("ab") as out:
            proc = subprocess.Popen(
                [self._spark_class(), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env(),
                start_new_session=True,
            )
        self._pid_file(name).write_text(f"{proc.pid}\n")

    def down(self, log=print) -> None:
        for name in reversed(self.names()):
            pid = self.pid(name)
            if pid is not None:
                log(f"stopping spark {name} (pid {pid})")
                process.stop_pid(pid)
            self._pid_file(name).unlink(missing_ok=True)
