"""Topics written by ordinary clients, declared in pipelines.yml alone: JSON from Confluent's JSON Schema
serializer, plain strings (what Kafka's VerifiableProducer writes), log lines parsed by a pattern, and
opaque bytes. Each lands typed exactly as written, every malformed record a rejected row with its
reason, and the invariants hold."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from eosflow.pipelines import SCHEMA_SETTINGS
from eosflow.schema.record import NO_SCHEMA_ID
from eosflow.schema.text import NOT_MATCHING
from eosflow_dev.runtime import jars, prereqs
from tests.integration.test_declared_pipeline import _produce

pytestmark = pytest.mark.integration


def declare(case, **schema) -> None:
    """The case's pipeline with this record declaration instead of the orders one."""
    case.spec = {k: v for k, v in case.spec.items() if k not in SCHEMA_SETTINGS}
    case.write_config(**schema)


def test_json_from_confluents_json_schema_serializer_lands_beside_plain_json(case, schema_registry):
    declare(
        case,
        columns=[
            {"name": "order_id", "type": "text", "required": True},
            {"name": "amount", "type": "numeric(10,2)", "required": True},
            {"name": "city", "type": "text", "source": "$.address.city"},
            {"name": "value_schema_id", "type": "integer", "source": "@schema_id"},
        ],
    )
    schema = {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "amount": {"type": "number"},
            "address": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        "required": ["order_id", "amount"],
    }
    serialize = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": schema_registry.url}))
    context = SerializationContext(case.topic, MessageField.VALUE)
    framed = [
        serialize({"order_id": f"o{i}", "amount": i + 0.25, "address": {"city": "Oslo"}}, context)
        for i in range(4)
    ]
    assert all(v[:1] == b"\x00" for v in framed)  # the serializer's wire format, not plain JSON
    plain = json.dumps({"order_id": "p1", "amount": 9.5}).encode()
    poison = [
        (framed[0][:3], NO_SCHEMA_ID),
        (framed[0][:5] + b"not json", "not JSON"),
        (framed[0][:5] + b'{"order_id": "x"}', "missing field: amount"),
    ]
    _produce(
        case.settings.bootstrap_servers,
        case.topic,
        [(None, v) for v in [*framed, plain]] + [(None, v) for v, _ in poison],
    )

    summary = case.ingest()

    assert summary.outcome == "committed" and case.violations() == []
    rows = case.query(
        f"select order_id, amount::text, city, value_schema_id from {case.table} order by order_id"
    )
    schema_id = int.from_bytes(framed[0][1:5], "big")  # the registry's id for the serializer's schema
    expected = [(f"o{i}", f"{i}.25", "Oslo", schema_id) for i in range(4)] + [("p1", "9.50", None, None)]
    assert rows == expected
    assert sorted((e, bytes(v)) for _, _, e, v in case.rejected()) == sorted((e, v) for v, e in poison)


def test_plain_strings_from_kafkas_verifiable_producer_land_as_text_typed_by_their_column(case):
    """The tool the issue tried: 500 of 500 rejected as "not JSON", although "17" is a JSON document."""
    declare(case, format="text", key="bytes", columns=[{"name": "n", "type": "bigint", "required": True}])
    _produce(case.settings.bootstrap_servers, case.topic, [])  # the topic, made by eosflow's own helper
    tool = [
        prereqs.java(),
        "-cp",
        jars.classpath(case.settings, "kafka"),
        "org.apache.kafka.tools.VerifiableProducer",
        "--bootstrap-server",
        case.settings.bootstrap_servers,
        "--topic",
        case.topic,
        "--max-messages",
        "500",
        "--repeating-keys",
        "7",
    ]
    done = subprocess.run(tool, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    _produce(case.settings.bootstrap_servers, case.topic, [(None, b"twenty"), (None, b"\xff\xfe")])

    summary = case.ingest()

    assert summary.outcome == "committed" and case.violations() == []
    assert [r[0] for r in case.query(f"select n from {case.table} order by n")] == list(range(500))
    assert sorted(e for _, _, e, _ in case.rejected()) == [
        "mistyped field: n (expected 64-bit integer)",
        "not UTF-8",
    ]


def test_log_lines_are_parsed_into_columns_by_the_declared_pattern(case):
    declare(
        case,
        format="text",
        text_pattern=r"(?P<at>\S+) (?P<level>[A-Z]+) (?P<status>\d{3}) (?P<path>\S+)",
        columns=[
            {"name": "at", "type": "timestamptz", "required": True},
            {"name": "level", "type": "text", "required": True},
            {"name": "status", "type": "integer", "required": True},
            {"name": "path", "type": "text"},
        ],
    )
    lines = [
        b"2026-01-02T03:04:05Z INFO 200 /a",
        "2026-01-02T03:04:06.5+01:00 WARN 503 /b/é".encode(),
        b"GET /c HTTP/1.1",
    ]
    _produce(case.settings.bootstrap_servers, case.topic, [(None, v) for v in lines])

    summary = case.ingest()

    assert summary.outcome == "committed" and case.violations() == []
    rows = case.query(f"select at::text, level, status, path from {case.table} order by at")
    assert rows == [
        ("2026-01-02 02:04:06.5+00", "WARN", 503, "/b/é"),
        ("2026-01-02 03:04:05+00", "INFO", 200, "/a"),
    ]
    assert [(e, bytes(v)) for _, _, e, v in case.rejected()] == [(NOT_MATCHING, lines[2])]


def test_opaque_bytes_land_byte_for_byte(case):
    declare(
        case, format="bytes", key="bytes", columns=[{"name": "payload", "type": "bytea", "required": True}]
    )
    values = [os.urandom(n) for n in (0, 1, 17, 300)] + [b"\x00" * 5]
    _produce(case.settings.bootstrap_servers, case.topic, [(b"\xff\x00", v) for v in values] + [(None, None)])

    summary = case.ingest()

    assert summary.outcome == "committed" and case.violations() == []
    stored = [bytes(r[0]) for r in case.query(f"select payload from {case.table}")]
    assert sorted(stored) == sorted(values)
    assert case.column_types()["payload"] == "bytea"
    assert [e for _, _, e, _ in case.rejected()] == ["null value"]


def test_bytes_and_text_land_in_an_iceberg_table_and_a_kafka_topic_too(case, tmp_path):
    """bytea is a new column type: the other sinks take it as their own binary (Iceberg) or base64 (JSON)."""
    import base64

    from tests.integration.test_iceberg_sink import as_iceberg_sink, scan
    from tests.kafka_reader import read_all

    declare(case, format="bytes", columns=[{"name": "payload", "type": "bytea", "required": True}])
    table = as_iceberg_sink(case)
    values = [b"\x00\xff", b"", os.urandom(40)]
    _produce(case.settings.bootstrap_servers, case.topic, [(None, v) for v in values])
    assert case.ingest().outcome == "committed"
    assert sorted(r["payload"] for r in scan(case, table)) == sorted(values)

    other = case.__class__(case.settings, tmp_path / "k.yml")  # a pipeline of its own, into Kafka
    declare(other, format="bytes", columns=[{"name": "payload", "type": "bytea", "required": True}])
    other.spec.pop("target_table", None)
    other.write_config(sink="kafka", output_topic=f"out.{other.name}")
    _produce(other.settings.bootstrap_servers, other.topic, [(None, v) for v in values])
    done = other.ingest_process()  # its own process: EOSFLOW_PIPELINES names its file
    assert done.returncode == 0, done.stderr[-2000:]
    out = read_all(other.settings, f"out.{other.name}")
    assert sorted(base64.b64decode(json.loads(m.value())["payload"]) for m in out) == sorted(values)
