"""The demo's Airflow: `airflow dags test` of one DAG at a time, all in one Airflow process.

A separate `airflow dags test` process spends 8 to 10 s (more on a busy machine) importing Airflow,
parsing the DAGs and starting its in-process API before its first task runs; the demo runs four DAGs, so
one process (eosflow_dev.demo.dag_worker) pays that once. It starts as the demo begins and runs `airflow db
migrate` meanwhile (on a fresh clone that makes Airflow's whole database); every run waits for it. Each
command's full output (every task log) goes to a file of its own, so the console keeps the summaries
readable.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable

from eosflow_dev.stack import airflow_local
from eosflow_dev.stack.settings import StackSettings

FINISHED = re.compile(r"DagRun Finished: dag_id=\S+, .*?run_id=([^,\s]+),.*?state=(\w+)")


class DagRuns:
    def __init__(self, settings: StackSettings, log: Callable[[str], None]) -> None:
        self.settings = settings
        self.log = log
        self._worker: subprocess.Popen | None = None
        self._migrated: bool | None = None

    def start(self) -> None:
        """The Airflow process, which migrates the metadata database first."""
        self.settings.airflow_home.mkdir(parents=True, exist_ok=True)
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        self._worker = subprocess.Popen(
            [sys.executable, "-m", "eosflow_dev.demo.dag_worker", str(self.settings.state_dir)],
            env=airflow_local.airflow_env(self.settings),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stdin.close()
            self._worker.wait(timeout=60)
            self._worker = None

    def _answer(self) -> str | None:
        """The worker's answer to its last command: None when it succeeded, else what went wrong."""
        assert self._worker is not None
        line = self._worker.stdout.readline().strip()
        if not line:
            return f"the Airflow process ended (exit {self._worker.wait()})"
        return None if line == "ok" else line.removeprefix("failed ")

    def __call__(self, dag_id: str) -> str | None:
        """`airflow dags test` of the DAG; the run id if it succeeded."""
        if self._worker is None:
            self.start()
        assert self._worker is not None
        if self._migrated is None:
            error = self._answer()
            self._migrated = error is None
            if error:
                path = self.settings.state_dir / "demo-airflow-db-migrate.log"
                self.log(f"`airflow db migrate` failed ({error}); its output: {path}")
        if not self._migrated:
            return None
        log_path = self.settings.state_dir / f"demo-airflow-{dag_id}.log"
        self._worker.stdin.write(dag_id + "\n")
        self._worker.stdin.flush()
        error = self._answer()
        finished = FINISHED.findall(log_path.read_text(errors="replace")) if log_path.exists() else []
        if error is not None or not finished or finished[-1][1] != "success":
            state = finished[-1][1] if finished else "no result"
            self.log(f"the DAG run did not succeed ({error or state}); task logs: {log_path}")
            return None
        self.log(f"DAG run {finished[-1][0]} succeeded (task logs: {log_path})")
        return finished[-1][0]
