"""`eosflow metrics`: the pipelines' metrics for Prometheus, no login, read as the read-only role."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from eosflow_dev.stack.airflow_server import free_port

pytestmark = pytest.mark.integration


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_exporter_serves_lag_positions_and_totals_and_stops_on_sigterm(case):
    case.produce(120, seed=611, partitions=2)
    case.ingest()
    case.produce(30, seed=612, partitions=2)  # waiting: lag
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "eosflow.cli", "metrics", "--listen", f"127.0.0.1:{port}"],
        env=case.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                samples = _scrape(f"http://127.0.0.1:{port}/metrics")
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
                time.sleep(0.5)
        mine = {k: v for k, v in samples.items() if ("pipeline", case.name) in k[1]}
        lag = sum(v for (name, _), v in mine.items() if name == "eosflow_lag_records")
        positions = sum(v for (name, _), v in mine.items() if name == "eosflow_position")
        assert (lag, positions) == (30, 120)
        assert mine[("eosflow_rows_written_total", (("pipeline", case.name),))] == 120
        assert mine[("eosflow_kafka_reachable", (("pipeline", case.name),))] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "read as eosflow_reader" in out and "stopped" in out


def test_a_bad_listen_address_is_refused_with_the_form_it_wants():
    done = subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "metrics", "--listen", "9464"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "give host:port, e.g. 127.0.0.1:9464" in done.stderr
