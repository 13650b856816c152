"""A real `airflow standalone` in the background, driven through its REST API.

The REST and browser tests use it, and so does the delivery lab (an Airflow task cleared and
re-run after it succeeded). It has its own AIRFLOW_HOME and a free port, so it never collides
with an `eosflow airflow` a developer keeps open.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from eosflow_dev.stack import airflow_local, process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AirflowServerError(RuntimeError):
    """The server did not start, refused us, or a run did not finish in time."""


@dataclass
class AirflowServer:
    base: str
    password: str
    proc: object
    log_path: Path

    def request(
        self, method: str, path: str, body: dict | None = None, token: str | None = None
    ) -> tuple[int, dict]:
        req = urllib.request.Request(
            f"{self.base}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=15) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, {"detail": exc.read().decode(errors="replace")[:500]}

    def token(self) -> str:
        code, body = self.request("POST", "/auth/token", {"username": "admin", "password": self.password})
        if code not in (200, 201):
            raise AirflowServerError(f"POST /auth/token answered {code}: {body}")
        return body["access_token"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        token, deadline = self.token(), time.monotonic() + timeout
        while time.monotonic() < deadline:
            code, body = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", token=token)
            if code == 200 and body.get("state") in ("success", "failed"):
                return body["state"]
            time.sleep(3)
        raise AirflowServerError(f"{dag_id} run {run_id} did not finish in {timeout}s; log: {self.log_path}")

    def asset_events(self, query: str, timeout: float = 60) -> dict:
        """GET /api/v2/assets/events?<query>. Airflow 3.3.2 answers 500 while a run an event created
        is queued with no start_date yet (apache/airflow#71360, fixed upstream by #71379): an event
        that schedules a run passes through that window, so it is waited out, not read as a failure."""
        path, deadline = f"/api/v2/assets/events?{query}", time.monotonic() + timeout
        code, body = self.request("GET", path, token=self.token())
        while code == 500 and time.monotonic() < deadline:
            time.sleep(2)
            code, body = self.request("GET", path, token=self.token())
        if code != 200:
            raise AirflowServerError(f"GET {path} answered {code}: {body}")
        return body

    def log_tail(self) -> str:
        return process.tail(self.log_path, 60)


def start(
    settings, state_dir: Path, pipelines_file: Path, timeout: float = 240, env: dict[str, str] | None = None
) -> AirflowServer:
    s = dataclasses.replace(settings, state_dir=state_dir, airflow_port=free_port())
    log_path = state_dir / "standalone.log"
    state_dir.mkdir(parents=True, exist_ok=True)
    out = log_path.open("wb")
    proc = airflow_local.start(
        s,
        log=lambda m: None,
        stdout=out,
        stderr=out,
        extra_env={
            "EOSFLOW_PIPELINES": str(pipelines_file),
            "EOSFLOW_STATE_DIR": str(settings.state_dir),
            **(env or {}),
        },
    )
    server = AirflowServer(
        f"http://127.0.0.1:{s.airflow_port}", airflow_local.admin_password(s), proc, log_path
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AirflowServerError(f"airflow standalone exited during start-up:\n{server.log_tail()}")
        try:
            code, _ = server.request("GET", "/api/v2/monitor/health")
            if code == 200 and _backfill_dags_parsed(server):
                return server
        except (OSError, AirflowServerError):
            pass
        time.sleep(2)
    stop(server)
    raise AirflowServerError(f"airflow standalone not ready in {timeout}s:\n{server.log_tail()}")


def _backfill_dags_parsed(server: AirflowServer) -> bool:
    """The DAG files are parsed once a pipeline's backfill DAG (eosflow_backfill_<pipeline>) is listed."""
    code, body = server.request("GET", "/api/v2/dags?dag_id_pattern=eosflow_backfill_", token=server.token())
    return code == 200 and body.get("total_entries", 0) > 0


def stop(server: AirflowServer) -> None:
    process.stop_pid(server.proc.pid)
