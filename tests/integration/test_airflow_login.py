"""`eosflow airflow` serves the UI and its login works, checked over the real REST API."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from eosflow import airflow_local
from eosflow.stack import process

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _request(url: str, body: dict | None = None, token: str | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, {}


def test_standalone_serves_the_ui_and_the_admin_login_works(settings, tmp_path):
    s = dataclasses.replace(settings, state_dir=tmp_path / "state", airflow_port=_free_port())
    log_file = (tmp_path / "airflow.log").open("wb")
    proc = airflow_local.start(s, log=lambda m: None, stdout=log_file, stderr=log_file)
    base = f"http://127.0.0.1:{s.airflow_port}"
    try:

        def healthy() -> bool:
            try:
                return _request(f"{base}/api/v2/monitor/health")[0] == 200
            except OSError:
                return False

        deadline = time.monotonic() + 180
        while not healthy():
            assert proc.poll() is None, (tmp_path / "airflow.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "airflow standalone not healthy after 180s"
            time.sleep(2)

        password = airflow_local.admin_password(s)
        assert _request(f"{base}/auth/token", {"username": "admin", "password": "wrong"})[0] in (401, 403)
        code, body = _request(f"{base}/auth/token", {"username": "admin", "password": password})
        assert code in (200, 201) and body.get("access_token")
        code, dags = _request(f"{base}/api/v2/dags", token=body["access_token"])
        assert code == 200 and "dags" in dags
    finally:
        process.stop_pid(proc.pid)
        log_file.close()


def test_connections_resolve_to_the_stack_inside_airflow(settings, tmp_path):
    """spark_default must be the local master: without it the provider silently picks YARN."""
    import subprocess
    import sys

    s = dataclasses.replace(settings, state_dir=tmp_path / "state")
    code = (
        "from airflow.sdk.bases.hook import BaseHook\n"
        "import json\n"
        "out = {c: BaseHook.get_connection(c) for c in ('spark_default', 'kafka_default', 'warehouse')}\n"
        "print(json.dumps({k: [v.conn_type, v.host, v.port, v.schema, v.login, v.extra_dejson]"
        " for k, v in out.items()}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=airflow_local.airflow_env(s),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    conns = json.loads(done.stdout.strip().splitlines()[-1])
    assert conns["spark_default"][:2] == ["spark", "local[2]"]
    assert conns["kafka_default"][5] == {"bootstrap.servers": s.bootstrap_servers}
    assert conns["warehouse"][:5] == ["postgres", s.pg_host, s.pg_port, s.pg_database, s.pg_user]
