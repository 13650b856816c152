"""OpenLineage events of a run (eosflow.observe.openlineage; docs/DESIGN.md, Orchestration: "OpenLineage"),
each validated against the spec's own JSON schemas (tests/data/openlineage, copied from the spec): the event
against OpenLineage.json's RunEvent, every facet against the schema its `_schemaURL` names, eosflow's own
facet against the schema the wheel ships. Then what they name: the topic, the target, each column's source."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from eosflow import pipelines
from eosflow import settings as settings_mod
from eosflow.ledger.positions import PartitionCounts
from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
from eosflow.observe import openlineage
from eosflow.runners.summary import RunSummary

SPEC = Path(__file__).resolve().parents[2] / "data" / "openlineage"
SECRET = "pw-in-no-event"


def _registry() -> Registry:
    resources = [Resource.from_contents(json.loads(p.read_text())) for p in SPEC.glob("*.json")]
    for ours in (openlineage.FACET_SCHEMA, openlineage.PUBLISH_FACET_SCHEMA):
        resources.append(Resource.from_contents(json.loads(ours.read_text())))
    return Registry().with_resources((r.contents["$id"], r) for r in resources)


REGISTRY = _registry()
SCHEMA_IDS = {
    json.loads(p.read_text())["$id"]
    for p in [*SPEC.glob("*.json"), openlineage.FACET_SCHEMA, openlineage.PUBLISH_FACET_SCHEMA]
}


def _validate(event: dict) -> None:
    """The event against RunEvent; each facet against the schema its _schemaURL names (the core schema
    lets a facet hold anything, so each facet's own schema is what checks it)."""
    core = {"$ref": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"}
    Draft202012Validator(core, registry=REGISTRY).validate(event)
    facets = list(event["run"].get("facets", {}).values()) + list(event["job"].get("facets", {}).values())
    for dataset in event.get("inputs", []) + event.get("outputs", []):
        facets += list(dataset.get("facets", {}).values())
        facets += list(dataset.get("inputFacets", {}).values()) + list(
            dataset.get("outputFacets", {}).values()
        )
    assert facets
    for facet in facets:
        Draft202012Validator({"$ref": facet["_schemaURL"]}, registry=REGISTRY).validate(facet)


def _validate_core(event: dict) -> None:
    """An event another producer (Airflow's OpenLineage provider) made with eosflow's datasets and facets:
    the event against RunEvent, and every facet whose schema is the spec's or eosflow's; the provider's own
    facets (airflow, processing_engine, ...) are its to check."""
    _validate(_filtered(event, lambda facet: facet["_schemaURL"].split("#")[0] in SCHEMA_IDS))


def _filtered(event: dict, keep) -> dict:
    def facets(holder: dict, key: str) -> None:
        if key in holder:
            holder[key] = {k: v for k, v in holder[key].items() if keep(v)}

    event = json.loads(json.dumps(event))
    facets(event["run"], "facets")
    facets(event["job"], "facets")
    for dataset in event.get("inputs", []) + event.get("outputs", []):
        for key in ("facets", "inputFacets", "outputFacets"):
            facets(dataset, key)
    return event


@pytest.fixture
def settings():
    return dataclasses.replace(
        settings_mod.load(),
        kafka_bootstrap="broker-1.example:9093,broker-2.example:9093",
        pg_host="warehouse.example",
        pg_port=5433,
        pg_database="analytics",
        pg_password=SECRET,
    )


def _pipeline(tmp_path, **spec) -> pipelines.Pipeline:
    entry = {
        "topics": ["orders.v1"],
        "target_table": "raw.orders",
        "columns": [
            {"name": "order_id", "type": "uuid", "required": True},
            {"name": "amount", "type": "numeric(12,2)", "source": "$.total.amount"},
            {"name": "schema_id", "type": "integer", "source": "@schema_id"},
        ],
    } | spec
    if entry.get("sink") == "kafka":
        entry.pop("target_table")
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": {"orders": entry}}))
    if "format" not in spec:  # @schema_id needs a registry format; a JSON pipeline declares without it
        entry["columns"] = entry["columns"][:2]
        path.write_text(yaml.safe_dump({"pipelines": {"orders": entry}}))
    return pipelines.load(settings_mod.load(), "orders", path)


def _summary() -> RunSummary:
    ranges = (
        PartitionPlan(OffsetRange("orders.v1", 0, 10, 20), False),
        PartitionPlan(OffsetRange("orders.v1", 1, 0, 5), True),
    )
    plan = Plan("orders__run-1", "orders", "run-1", ranges)
    counts = {("orders.v1", 0): PartitionCounts(10, 9, 1), ("orders.v1", 1): PartitionCounts(5, 5, 0)}
    return RunSummary("orders", "orders__run-1", "committed", plan, counts)


def test_a_runs_start_complete_and_fail_validate_against_the_spec_and_name_topic_and_table(
    settings, tmp_path
):
    run = openlineage.RunLineage(settings, _pipeline(tmp_path), "ingest")
    events = [openlineage.as_json(e) for e in (run.start(), run.complete(_summary()), run.fail("FENCED: x"))]
    for event in events:
        _validate(event)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "FAIL"]
    assert len({e["run"]["runId"] for e in events}) == 1  # one run, its events share the id
    assert {(e["job"]["namespace"], e["job"]["name"]) for e in events} == {("eosflow", "orders.ingest")}
    for event in events:
        assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
            ("kafka://broker-1.example:9093", "orders.v1")
        ]
        assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [
            ("postgres://warehouse.example:5433", "analytics.raw.orders")
        ]
        assert SECRET not in json.dumps(event)

    out = events[1]["outputs"][0]
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [
        ("order_id", "uuid"),
        ("amount", "numeric(12,2)"),
    ]
    lineage = out["facets"]["columnLineage"]["fields"]
    assert lineage["amount"]["inputFields"] == [
        {
            "namespace": "kafka://broker-1.example:9093",
            "name": "orders.v1",
            "field": "total.amount",
            "transformations": [],
        }
    ]
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 14
    facet = events[1]["run"]["facets"]["eosflow_run"]
    assert facet["batchId"] == "orders__run-1" and facet["outcome"] == "committed"
    assert facet["ranges"][0] == {
        "topic": "orders.v1",
        "partition": 0,
        "start": 10,
        "end": 20,
        "read": 10,
        "written": 9,
        "rejected": 1,
    }
    assert events[2]["run"]["facets"]["errorMessage"]["message"] == "FENCED: x"


def test_a_kafka_sinks_output_is_a_topic_in_kafkas_naming(settings, tmp_path):
    pipeline = _pipeline(tmp_path, sink="kafka", output_topic="orders.clean")
    event = openlineage.as_json(openlineage.RunLineage(settings, pipeline, "ingest").complete(_summary()))
    _validate(event)
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [
        ("kafka://broker-1.example:9093", "orders.clean")
    ]


def test_a_change_streams_outputs_are_its_changelog_then_its_state_table(settings, tmp_path):
    """Both are written in the commit's one transaction; the rows written are the changelog's."""
    pipeline = _pipeline(
        tmp_path,
        changes="debezium",
        primary_key=["order_id"],
        state_table="replica.orders",
        business_key=None,
    )
    event = openlineage.as_json(openlineage.RunLineage(settings, pipeline, "ingest").complete(_summary()))
    _validate(event)
    changelog, state = event["outputs"]
    assert [(d["namespace"], d["name"]) for d in (changelog, state)] == [
        ("postgres://warehouse.example:5433", "analytics.raw.orders"),
        ("postgres://warehouse.example:5433", "analytics.replica.orders"),
    ]
    assert changelog["outputFacets"]["outputStatistics"]["rowCount"] == 14
    assert "outputStatistics" not in state.get("outputFacets", {})
    assert state["facets"]["schema"] == changelog["facets"]["schema"]
    assert state["facets"]["columnLineage"]["fields"]["amount"]["inputFields"][0]["field"] == "total.amount"


def test_a_streams_summary_is_a_streaming_job_whose_facet_validates(settings, tmp_path):
    from eosflow.runners.stream_status import StreamStatus

    status = StreamStatus(run_prefix="stream__20261127T000000_abcdef")
    status.committed(_summary())
    run = openlineage.RunLineage(settings, _pipeline(tmp_path), "stream")
    event = openlineage.as_json(run.complete(status.summary("orders")))
    _validate(event)
    assert event["job"]["name"] == "orders.stream"
    assert event["job"]["facets"]["jobType"]["processingType"] == "STREAMING"
    facet = event["run"]["facets"]["eosflow_run"]
    assert (facet["planKind"], facet["outcome"], len(facet["ranges"])) == ("stream", "stopped", 2)


def test_a_publishers_run_reads_its_outbox_table_and_writes_its_topic(settings):
    from eosflow.publish.declaration import Publisher
    from eosflow.publish.position import Position
    from eosflow.publish.run import PublishSummary

    publisher = Publisher("orders_out", "app.outbox", "orders.events", "id")
    run = openlineage.PublishLineage(settings, publisher)
    summary = PublishSummary("orders_out", position=Position(812, "40"), transactions=3, rows=40, rejected=2)
    events = [openlineage.as_json(e) for e in (run.start(), run.complete(summary), run.fail("FENCED: y"))]
    for event in events:
        _validate(event)
        assert event["job"]["name"] == "orders_out.publish"
        assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
            ("postgres://warehouse.example:5433", "analytics.app.outbox")
        ]
        assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [
            ("kafka://broker-1.example:9093", "orders.events")
        ]
        assert SECRET not in json.dumps(event)
    facet = events[1]["run"]["facets"]["eosflow_publish"]
    assert (facet["transactions"], facet["rows"], facet["rejected"], facet["position"]) == (
        3,
        40,
        2,
        "812/40",
    )
    assert events[1]["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 38


def test_a_column_from_the_records_metadata_or_a_transform_has_no_field_lineage(settings, tmp_path):
    """@schema_id is the registry's id of the writer schema, not a field: no input field is named for it."""
    pipeline = _pipeline(tmp_path, format="avro")
    out = openlineage.as_json(openlineage.RunLineage(settings, pipeline, "ingest").start())["outputs"][0]
    assert set(out["facets"]["columnLineage"]["fields"]) == {"amount", "order_id"}
    assert "schema_id" in {f["name"] for f in out["facets"]["schema"]["fields"]}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"OPENLINEAGE_URL": "http://marquez:5000"}, True),
        ({"OPENLINEAGE__TRANSPORT__TYPE": "file"}, True),
        ({"OPENLINEAGE_CONFIG": "/etc/openlineage.yml"}, True),
        ({"OPENLINEAGE_URL": "http://marquez:5000", "OPENLINEAGE_DISABLED": "true"}, False),
    ],
)
def test_the_cli_emits_only_when_the_client_is_configured(environ, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no openlineage.yml here
    monkeypatch.setenv("HOME", str(tmp_path))
    assert openlineage.configured(environ) is expected


def test_the_validation_above_refuses_an_event_the_spec_does_not_allow(settings, tmp_path):
    """The check is not vacuous: an event without its run id, or a facet of the wrong shape, fails it."""
    from jsonschema import ValidationError

    event = openlineage.as_json(openlineage.RunLineage(settings, _pipeline(tmp_path), "ingest").start())
    broken = json.loads(json.dumps(event))
    del broken["run"]["runId"]
    with pytest.raises(ValidationError, match="runId"):
        _validate(broken)
    broken = json.loads(json.dumps(event))
    broken["outputs"][0]["facets"]["schema"]["fields"] = "amount"
    with pytest.raises(ValidationError):
        _validate(broken)


def test_a_request_refused_before_a_run_begins_sends_no_event(tmp_path, monkeypatch):
    """`--range` without `--mode`: refused (exit 2) before anything is planned, and no START is left without
    its end."""
    from eosflow.spark import job_main

    sent = tmp_path / "lineage.jsonl"
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(sent))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")
    said: list[str] = []
    args = job_main.parse(["--pipeline", "orders", "--range", "orders:0:0-10"])
    assert job_main.execute(args, settings_mod.load(), said.append, lineage=True) == 2
    assert said == ["--range needs --mode and --run-id"]
    assert not sent.exists()


@pytest.mark.parametrize(
    ("uri", "namespace", "name"),
    [
        ("s3://lake/warehouse/ns/orders", "s3://lake", "warehouse/ns/orders"),
        ("s3a://lake/warehouse/ns/orders", "s3://lake", "warehouse/ns/orders"),  # Hadoop's spelling of S3
        ("gs://lake/ns/orders", "gs://lake", "ns/orders"),
        ("file:///srv/warehouse/ns/orders", "file", "/srv/warehouse/ns/orders"),
        ("hdfs://namenode:8020/warehouse/ns/orders", "hdfs://namenode:8020", "/warehouse/ns/orders"),
    ],
)
def test_a_table_in_storage_is_named_by_its_location_as_openlineage_names_storage(uri, namespace, name):
    assert openlineage.from_uri(uri) == openlineage.Named(namespace, name)
