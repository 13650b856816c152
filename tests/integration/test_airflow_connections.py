"""Inside Airflow, the connections `eosflow airflow` provisions point at the stack."""

from __future__ import annotations

import dataclasses
import json

import pytest

from eosflow_dev.stack import airflow_local

pytestmark = pytest.mark.integration


def test_connections_resolve_to_the_stack_inside_airflow(settings, tmp_path):
    """spark_default must be the local master: without it the provider silently picks YARN."""
    import subprocess
    import sys

    s = dataclasses.replace(settings, state_dir=tmp_path / "state")
    code = (
        "from airflow.sdk.bases.hook import BaseHook\n"
        "import json\n"
        "names = ('spark_default', 'kafka_default', 'warehouse', 'warehouse_readonly')\n"
        "out = {c: BaseHook.get_connection(c) for c in names}\n"
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
    reader = ["postgres", s.pg_host, s.pg_port, s.pg_database, s.pg_reader_user]
    assert conns["warehouse_readonly"][:5] == reader and s.pg_reader_user != s.pg_user
