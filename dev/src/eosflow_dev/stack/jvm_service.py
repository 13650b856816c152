"""A stack server that is one JVM process started from jars eosflow fetched: how the optional servers
(Kafka Connect, the Iceberg REST catalog, the S3 server) start, are found again, wait for health and stop.

A subclass names its jar set, main class and heap, says what on its command line names its state folder
(so a pid file left by another checkout is never taken for it), answers `healthy`, and may write its files
before a start (`configure`) and finish after one (`ready`, also when it was already running).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import ClassVar

from eosflow.errors import StackError
from eosflow_dev.runtime import jars, prereqs
from eosflow_dev.stack import process, start_lock
from eosflow_dev.stack.settings import StackSettings


class JvmService:
    name: ClassVar[str]  # as `eosflow stack` names it, and its folder under the state dir
    title: ClassVar[str]  # as a sentence names it: "the S3 server"
    main: ClassVar[str]  # the main class
    heap: ClassVar[str]  # -Xmx
    start_timeout_s: ClassVar[float] = 60.0
    poll_s: ClassVar[float] = 0.25

    def __init__(self, settings: StackSettings) -> None:
        self.s = settings
        self.home: Path = settings.state_dir / self.name
        self.log_path: Path = self.home / f"{self.name}.log"
        self.pid_file: Path = self.home / f"{self.name}.pid"

    # -- what a subclass says ---------------------------------------------------------------------------
    def ports(self) -> dict[str, int]:
        raise NotImplementedError

    def endpoint(self) -> str:
        raise NotImplementedError

    def healthy(self, timeout: float = 3.0) -> bool:
        raise NotImplementedError

    def marker(self) -> str:
        """An argument of the command line that names this state folder (process.owned_pid)."""
        raise NotImplementedError

    def jvm_args(self) -> list[str]:
        return []

    def main_args(self) -> list[str]:
        return []

    def command(self) -> list[str]:
        """How it starts: java on the fetched jars (a server started by a script of its own overrides it)."""
        return [
            prereqs.java(),
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",  # one small heap, no parallel GC threads: a smaller idle RSS
            *self.jvm_args(),
            "-cp",
            jars.classpath(self.s, self.name),
            self.main,
            *self.main_args(),
        ]

    def configure(self, log) -> dict[str, str] | None:
        """Before a start: its files written; the process's environment (None: this one's)."""
        return None

    def ready(self, log) -> None:
        """After it answers, whether it was started now or already running."""

    def not_healthy(self) -> str:
        return f"{self.title} did not answer {self.start_timeout_s:.0f}s after start"

    # -- the same for every one -------------------------------------------------------------------------
    def pid(self) -> int | None:
        return process.owned_pid(self.pid_file, self.marker())

    def prepare(self, log=print) -> None:
        prereqs.java()
        jars.fetch(self.s, self.name, log=log)

    def start(self, log=print) -> None:
        with start_lock.held(self.home / "start.lock"):
            self._start(log)

    def _start(self, log) -> None:
        if self.pid() is not None:
            if not self.healthy():
                self._wait_healthy(self.pid())
            self.ready(log)
            return
        self.prepare(log=log)
        self.home.mkdir(parents=True, exist_ok=True)
        env = self.configure(log)
        process.require_free_ports(self.title, self.s.kafka_host, self.ports())
        log(f"starting {self.title} on {self.endpoint()} (log: {self.log_path})")
        with self.log_path.open("ab") as out:
            proc = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.home,
                env=env,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        self._wait_healthy(proc.pid, proc)
        self.ready(log)

    def stop(self, log=print) -> None:
        pid = self.pid()
        if pid is None:
            return
        log(f"stopping {self.title} (pid {pid})")
        process.stop_pid(pid)
        self.pid_file.unlink(missing_ok=True)

    def _wait_healthy(self, pid: int, proc: subprocess.Popen | None = None) -> None:
        def died() -> str | None:
            alive = proc.poll() is None if proc is not None else process.pid_alive(pid)
            return None if alive else f"{self.title} exited during start-up:\n{process.tail(self.log_path)}"

        if not process.wait_until(self.healthy, self.start_timeout_s, interval=self.poll_s, abort=died):
            raise StackError(f"{self.not_healthy()}. See {self.log_path}:\n{process.tail(self.log_path)}")
