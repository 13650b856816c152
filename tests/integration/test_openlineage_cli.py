"""`eosflow ingest` reports itself to OpenLineage when the client is configured (docs/DESIGN.md,
Orchestration: "OpenLineage"): here with the client's own file transport, configured the way its users
configure it (OPENLINEAGE__TRANSPORT__*), each event validated against the spec's schemas; unconfigured,
nothing."""

from __future__ import annotations

import json

import pytest

from tests.unit.observe.test_openlineage import _validate

pytestmark = pytest.mark.integration


def _events(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_an_ingest_reports_start_and_complete_naming_its_topic_table_and_ranges(case, tmp_path):
    case.produce(40, seed=81, partitions=2)
    sent = tmp_path / "lineage.jsonl"
    env = {
        "OPENLINEAGE__TRANSPORT__TYPE": "file",
        "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(sent),
        "OPENLINEAGE__TRANSPORT__APPEND": "true",
        "OPENLINEAGE_NAMESPACE": "team-data",
    }
    done = case.ingest_process("--run-id", "lineage-1", **env)
    assert done.returncode == 0, done.stderr[-3000:]
    events = _events(sent)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for event in events:
        _validate(event)
        assert event["job"] == event["job"] | {"namespace": "team-data", "name": f"{case.name}.ingest"}
        assert [d["name"] for d in event["inputs"]] == [case.topic]
        assert [d["name"] for d in event["outputs"]] == [f"warehouse.{case.table}"]
        sent_text = json.dumps(event).lower()  # the stack's password is "eosflow": look for its forms
        assert "password" not in sent_text and f":{case.settings.pg_password}@" not in sent_text
    facet = events[1]["run"]["facets"]["eosflow_run"]
    assert facet["outcome"] == "committed" and sum(r["read"] for r in facet["ranges"]) == 40
    assert events[1]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 40

    # A run refused (its pipeline now names another topic than the one it committed): FAIL with its line.
    case.write_config(topics=["lineage.no-such-topic"])
    refused = case.ingest_process("--run-id", "lineage-2", **env)
    assert refused.returncode == 2
    events = _events(sent)[2:]
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    _validate(events[1])
    message = events[1]["run"]["facets"]["errorMessage"]["message"]
    assert "no longer" in message and message in refused.stderr  # the line the run printed, as it printed it


def test_an_ingest_with_no_openlineage_configuration_sends_nothing_and_says_nothing(case, tmp_path):
    case.produce(5, seed=82, partitions=1)
    done = case.ingest_process("--run-id", "quiet-1", HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "openlineage" not in (done.stderr + done.stdout).lower()


def test_a_backfill_reports_each_chunk_as_a_run_of_its_own(case, tmp_path):
    """`eosflow backfill`: a chunk is a batch with its own commit, so it is an OpenLineage run of its own:
    START and COMPLETE per chunk, the job `<pipeline>.backfill`, the chunk's range in eosflow's facet."""
    import subprocess
    import sys

    case.produce(30, seed=83, partitions=1)
    assert case.ingest().outcome == "committed"
    sent = tmp_path / "lineage.jsonl"
    env = {
        "OPENLINEAGE__TRANSPORT__TYPE": "file",
        "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(sent),
        "OPENLINEAGE__TRANSPORT__APPEND": "true",
    }
    done = subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "backfill", "--pipeline", case.name, "--mode", "replay"]
        + ["--partitions", "0", "--from-offset", "0", "--to-offset", "30", "--chunk-size", "15"],
        capture_output=True,
        text=True,
        timeout=600,
        env=case.env() | env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events = _events(sent)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "START", "COMPLETE"]
    for event in events:
        _validate(event)
        assert event["job"]["name"] == f"{case.name}.backfill"
    assert events[0]["run"]["runId"] == events[1]["run"]["runId"] != events[2]["run"]["runId"]
    chunks = [e["run"]["facets"]["eosflow_run"] for e in events[1::2]]
    assert [(f["planKind"], [(r["start"], r["end"]) for r in f["ranges"]]) for f in chunks] == [
        ("replay", [(0, 15)]),
        ("replay", [(15, 30)]),
    ]
