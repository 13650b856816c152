"""An Avro topic (Confluent wire format) declared in pipelines.yml alone, through Spark and the registry.

The writer schemas are registered with the stack's schema registry (Apicurio Registry, from Maven
Central) the way a producer's serializer does it;
the pipeline decodes every record with its own writer schema (two versions here), lands the declared
columns typed, and turns every record it cannot read into a rejected row with the reason. A registry
that cannot be reached stops the run with nothing written (exit 1: a retry helps), instead of
rejecting good records.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import fastavro
import pytest
from confluent_kafka import Producer

from eosflow.kafka_admin import ensure_topic
from eosflow.schema.avro import RegistryConfig, SchemaRegistry, encode

pytestmark = pytest.mark.integration

V1 = {
    "type": "record",
    "name": "Click",
    "namespace": "shop",
    "fields": [
        {"name": "click_id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "url", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {
            "name": "customer",
            "type": [
                "null",
                {"type": "record", "name": "Customer", "fields": [{"name": "id", "type": "string"}]},
            ],
            "default": None,
        },
        {"name": "n_items", "type": "long"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["view", "add", "buy"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "double"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "score", "type": "double"},
    ],
}
# v2 (a compatible evolution): customer dropped, a field nobody declared added.
V2 = {
    **V1,
    "fields": [f for f in V1["fields"] if f["name"] != "customer"]
    + [{"name": "note", "type": "string", "default": ""}],
}
DECLARATION = {
    "format": "avro",
    "key": "bigint",
    "columns": [
        {"name": "click_id", "type": "uuid", "required": True},
        {"name": "url", "type": "text", "required": True, "pattern": "^https?://"},
        {"name": "ts", "type": "timestamptz", "required": True},
        {"name": "customer", "type": "text", "source": "$.customer.id"},
        {"name": "n_items", "type": "bigint", "min": 0},
        {"name": "price", "type": "numeric(12,2)"},
        {"name": "kind", "type": "text", "enum": ["view", "add", "buy"]},
        {"name": "tags", "type": "text[]"},
        {"name": "attrs", "type": "jsonb"},
        {"name": "day", "type": "date"},
        {"name": "score", "type": "double"},
    ],
    "business_key": "click_id",
}


def click(i: int, **changes: object) -> dict:
    return {
        "click_id": uuid.UUID(int=i),
        "url": f"https://shop.example/p/{i}",
        "ts": datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC),
        "customer": {"id": f"c-{i}"},
        "n_items": i,
        "price": Decimal("9999999999.99"),
        "kind": "buy",
        "tags": ["sale", 'say "hi"', "{braces}"],
        "attrs": {"w": 1.5},
        "day": date(2026, 2, 28),
        "score": float("nan") if i == 3 else -0.125,
    } | changes


@pytest.fixture
def avro_case(case, schema_registry):
    case.write_config(**DECLARATION)
    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    return case


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    ensure_topic(bootstrap, topic, 2, log=lambda m: None)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, partition=i % 2)
    assert producer.flush(30) == 0


def test_an_avro_topic_lands_typed_from_its_declaration_and_its_writer_schemas(avro_case, schema_registry):
    case = avro_case
    registry = SchemaRegistry(schema_registry)
    v1 = registry.register(f"{case.topic}-value", V1)
    v2 = registry.register(f"{case.topic}-value", V2)
    assert v1 != v2
    p1, p2 = fastavro.parse_schema(V1), fastavro.parse_schema(V2)
    good = [(str(i).encode(), encode(v1, p1, click(i))) for i in range(1, 5)]
    evolved = {k: v for k, v in click(5).items() if k != "customer"} | {"note": "v2"}
    good.append((b"5", encode(v2, p2, evolved)))
    poison = [
        (b"6", b'{"click_id": "json, not avro"}', "not Avro: no Confluent wire-format header"),
        (
            b"7",
            encode(v1, p1, click(7))[:1] + (2**31 - 7).to_bytes(4, "big") + b"\x00",
            "not Avro: unknown schema id",
        ),
        (b"8", encode(v1, p1, click(8))[:-2], f"not Avro: does not decode with schema id {v1}"),
        (b"9", encode(v1, p1, click(9, url="ftp://x")), "invalid value: url (does not match ^https?://)"),
        (b"10", encode(v1, p1, click(10, tags=["\x00"])), "invalid value: tags (holds a NUL character"),
        (b"11", encode(v1, p1, click(11, attrs={"w": float("inf")})), "invalid value: attrs (holds inf"),
        (b"eleven", encode(v1, p1, click(12)), "mistyped key (expected 64-bit integer)"),
        (None, None, "null value"),
    ]
    _produce(case.settings.bootstrap_servers, case.topic, good + [(k, v) for k, v, _ in poison])

    summary = case.ingest()

    assert summary.outcome == "committed"
    assert case.violations() == []
    rows = case.query(
        "select kafka_key, click_id, url, ts, customer, n_items, price, kind, tags, attrs, day, score, "
        f"declaration_version from {case.table} order by kafka_key"
    )
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0][1:] == (
        uuid.UUID(int=1),
        "https://shop.example/p/1",
        datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC),
        "c-1",
        1,
        Decimal("9999999999.99"),
        "buy",
        ["sale", 'say "hi"', "{braces}"],
        {"w": 1.5},
        date(2026, 2, 28),
        -0.125,
        1,
    )
    assert rows[2][11] != rows[2][11]  # NaN: an Avro double may hold it, and double precision stores it
    assert rows[4][4] is None  # written under v2, which has no customer
    reasons = sorted(r[2] for r in case.rejected())
    assert len(reasons) == len(poison)
    for _, _, reason in poison:
        assert sum(r.startswith(reason) for r in reasons) == 1, (reason, reasons)
    types = dict(
        case.query(
            "select attname, format_type(atttypid, atttypmod) from pg_attribute "
            "where attrelid = %s::regclass and attnum > 0 and not attisdropped",
            case.table,
        )
    )
    assert types["kafka_key"] == "bigint" and types["price"] == "numeric(12,2)"


def test_a_registry_that_cannot_be_reached_stops_the_run_and_writes_nothing(avro_case, schema_registry):
    case = avro_case
    schema_id = SchemaRegistry(schema_registry).register(f"{case.topic}-value", V1)
    _produce(
        case.settings.bootstrap_servers,
        case.topic,
        [(b"1", encode(schema_id, fastavro.parse_schema(V1), click(1)))],
    )

    done = case.ingest_process(EOSFLOW_SCHEMA_REGISTRY_URL="http://127.0.0.1:1/apis/ccompat/v7")

    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "could not reach the schema registry at http://127.0.0.1:1" in last, last
    assert case.ledger() == [] and case.rejected() == []
    # The same run, the registry back: every record lands, none was turned into a rejected row.
    assert case.ingest_process(EOSFLOW_SCHEMA_REGISTRY_URL=schema_registry.url).returncode == 0
    assert case.query(f"select kafka_key from {case.table}") == [(1,)]
    assert case.rejected() == []


def test_an_avro_pipeline_without_a_registry_is_refused_before_planning(avro_case):
    done = avro_case.ingest_process(EOSFLOW_SCHEMA_REGISTRY_URL="", EOSFLOW_REGISTRY_PORT="0")
    assert done.returncode == 2
    assert "reads Avro, and no schema registry is configured" in done.stderr
    assert avro_case.query("select count(*) from eosflow.plans where pipeline = %s", avro_case.name) == [(0,)]


@pytest.fixture
def schema_registry(running_stack) -> RegistryConfig:
    """The stack's schema registry: Apicurio Registry's Confluent-compatible API (eosflow.stack.registry)."""
    registry = running_stack.registry
    assert registry is not None, "the stack runs a schema registry unless EOSFLOW_REGISTRY_PORT=0"
    return registry
