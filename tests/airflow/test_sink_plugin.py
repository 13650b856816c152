"""A sink eosflow does not know, installed as a package of its own (tests/sinks/jsonl_sink.py, entry
point `jsonl`), runs through `eosflow ingest`, `eosflow verify` and the ingest DAG: the seam holds.
Its truth is a folder of range markers; the ledger mirrors it and catches up after a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eosflow.sinks import registry
from tests.sinks import plugin

pytestmark = pytest.mark.integration


@pytest.fixture
def jsonl(case, tmp_path, monkeypatch):
    """The plugin installed, and the case's pipeline declared with `sink: jsonl`."""
    site = plugin.install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", plugin.pythonpath(site))
    registry.sink_class.cache_clear()
    folder = tmp_path / "out"
    case.spec.pop("target_table")
    case.write_config(sink="jsonl", jsonl_folder=str(folder))
    yield folder
    registry.sink_class.cache_clear()


def _rows(folder: Path) -> list[dict]:
    """The rows of every committed range (a marker names its files)."""
    rows = []
    for marker in folder.glob("*/*.commit.json"):
        body = json.loads(marker.read_text())
        rows += [json.loads(line) for line in (folder / body["rows_file"]).read_text().splitlines() if line]
    return rows


def _verify(case):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "verify", "--pipeline", case.name],
        env=case.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_plugin_sink_lands_every_record_once_through_eosflow_ingest_and_verify(case, jsonl):
    assert case.pipeline.sink.output == f"folder {jsonl}"  # found through its entry point
    manifest = case.produce(300, seed=611, transactional_id=f"{case.name}-tx", abort_ratio=0.2, txn_size=40)
    first = case.ingest_process()
    assert first.returncode == 0, first.stderr[-2000:]
    assert sorted(r["event_id"] for r in _rows(jsonl)) == sorted(e.event_id for e in manifest.visible())

    again = case.ingest_process()  # nothing new: the folder and the ledger stay as they are
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(_rows(jsonl)) == len(manifest.visible())
    checked = _verify(case)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-2000:]
    assert "jsonl verify of pipeline" in checked.stdout and "FAILED" not in checked.stdout


def test_a_plugin_sink_committed_before_a_crash_is_mirrored_by_the_next_run(case, jsonl):
    manifest = case.produce(200, seed=612, partitions=2)
    killed = case.ingest_process(EOSFLOW_CRASH_AT="in_commit")  # the folder committed, the ledger not
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert case.query("select count(*) from eosflow.ledger where pipeline = %s", case.name) == [(0,)]
    more = case.produce(100, seed=613, partitions=2)
    done = case.ingest_process()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mirrored" in done.stderr + done.stdout  # reconciled from the markers before planning
    expected = sorted(e.event_id for e in [*manifest.visible(), *more.visible()])
    assert sorted(r["event_id"] for r in _rows(jsonl)) == expected
    checked = _verify(case)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-2000:]


def test_a_plugin_sink_runs_through_the_ingest_dag(case, jsonl, airflow_db):
    from eosflow_airflow.dags import build_ingest_dag

    manifest = case.produce(250, seed=614)
    run = build_ingest_dag(case.pipeline).test()
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) == "success", states
    assert sorted(r["event_id"] for r in _rows(jsonl)) == sorted(e.event_id for e in manifest.visible())
    verdicts = case.query("select status from eosflow.checks where pipeline = %s", case.name)
    assert verdicts and {s for (s,) in verdicts} == {"pass"}  # the DAG's verify task asked the sink


def test_a_stream_goes_on_when_reading_its_latencies_back_fails(case, jsonl):
    """The latency read after a commit sat outside the stream's error handling: a Postgres blip there
    ended the stream. The plugin's second sink fails exactly that read, every time."""
    import subprocess
    import sys

    case.write_config(sink="jsonl_flaky_latency")
    manifest = case.produce(40, seed=615, partitions=1)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eosflow.cli",
            "stream",
            "--pipeline",
            case.name,
            "--trigger",
            "300ms",
            "--max-batches",
            "3",
        ],
        env=case.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "its latencies could not be read back" in done.stderr + done.stdout
    assert sorted(r["event_id"] for r in _rows(jsonl)) == sorted(e.event_id for e in manifest.visible())
