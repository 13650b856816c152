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


def _file_transport(path) -> dict[str, str]:
    """The client's file transport, configured as its users configure it: every event a line of `path`."""
    return {
        "OPENLINEAGE__TRANSPORT__TYPE": "file",
        "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(path),
        "OPENLINEAGE__TRANSPORT__APPEND": "true",
    }


def test_an_ingest_reports_start_and_complete_naming_its_topic_table_and_ranges(case, tmp_path):
    case.produce(40, seed=81, partitions=2)
    sent = tmp_path / "lineage.jsonl"
    env = _file_transport(sent) | {"OPENLINEAGE_NAMESPACE": "team-data"}
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
    env = _file_transport(sent)
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


def test_a_stream_reports_its_life_as_one_run_its_micro_batches_in_summary(case, tmp_path):
    """`eosflow stream`: START when it starts, COMPLETE when SIGTERM stops it, one run for all its
    micro-batches: each partition's range from its first committed offset to its last, the counts summed,
    the job `<pipeline>.stream`, STREAMING."""
    from tests.integration.test_stream import Stream

    sent = tmp_path / "lineage.jsonl"
    env = _file_transport(sent)
    case.produce(20, seed=84, partitions=2)
    stream = Stream(case, tmp_path / "stream.log", **env)

    def rows() -> int:  # 0 until the stream's first batch made the table
        made = case.query("select to_regclass(%s) is not null", case.table) == [(True,)]
        return case.query(f"select count(*) from {case.table}")[0][0] if made else 0

    stream.wait_for(lambda: rows() == 20)
    more = case.produce(15, seed=85, partitions=2)
    stream.wait_for(lambda: rows() == 20 + len(more.visible()))
    assert stream.stop() == 0, stream.output()[-3000:]

    events = _events(sent)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"], stream.output()[-3000:]
    for event in events:
        _validate(event)
        assert event["job"]["name"] == f"{case.name}.stream"
        assert event["job"]["facets"]["jobType"]["processingType"] == "STREAMING"
    facet = events[1]["run"]["facets"]["eosflow_run"]
    assert facet["planKind"] == "stream" and facet["outcome"] == "stopped"
    spans = f"select kafka_partition, min(kafka_offset), max(kafka_offset) + 1 from {case.table} group by 1"
    committed = {p: (lo, end) for p, lo, end in case.query(spans)}
    assert {r["partition"]: (r["start"], r["end"]) for r in facet["ranges"]} == committed
    assert sum(r["written"] for r in facet["ranges"]) == 20 + len(more.visible())


def test_a_publish_reports_its_outbox_table_in_and_its_topic_out(case, tmp_path):
    """`eosflow publish`: the outbox table (Postgres' naming) as the input, the topic as the output, and
    what it published in eosflow's publish facet."""
    import psycopg

    from tests.outbox import Outbox

    outbox = Outbox(case)
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 7)
    sent = tmp_path / "lineage.jsonl"
    done = outbox.cli(**_file_transport(sent))
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, err[-3000:]
    events = _events(sent)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for event in events:
        _validate(event)
        assert event["job"]["name"] == f"{case.name}.publish"
        assert [d["name"] for d in event["inputs"]] == [f"{case.settings.pg_database}.{outbox.table}"]
        assert [d["name"] for d in event["outputs"]] == [outbox.topic]
    facet = events[1]["run"]["facets"]["eosflow_publish"]
    assert (facet["rows"], facet["rejected"]) == (7, 0) and facet["position"].endswith("/7")


def test_an_iceberg_table_is_named_by_its_location_and_only_once_it_exists(case, tmp_path):
    """OpenLineage names a table in storage by where it is: the stack's catalog keeps this one in a local
    warehouse, so `file` / its path. The run that creates it has no output at START (there is no location
    yet) and names it at COMPLETE; the next run names it the same way in both events."""
    from eosflow.sinks.iceberg.catalog import catalog
    from tests.integration.test_iceberg_sink import as_iceberg_sink

    table = as_iceberg_sink(case)
    case.produce(30, seed=82, partitions=2)
    sent = tmp_path / "lineage.jsonl"
    env = _file_transport(sent)
    for run in ("lake-1", "lake-2"):
        case.produce(10, seed=83, partitions=2)
        done = case.ingest_process("--run-id", run, **env)
        assert done.returncode == 0, done.stderr[-3000:]
    location = catalog(case.settings).load_table(table).location()
    assert location.startswith("file://")
    named = [("file", location.removeprefix("file://"))]
    events = _events(sent)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"] * 2
    for event in events:
        _validate(event)
    outputs = [[(d["namespace"], d["name"]) for d in e["outputs"]] for e in events]
    assert outputs == [[], named, named, named]
    assert events[1]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 40
