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

from eosflow.schema.avro import SchemaRegistry, encode
from tests.avro_clicks import DECLARATION, WRITER, click
from tests.integration.test_declared_pipeline import _produce

pytestmark = pytest.mark.integration

V1 = WRITER
# v2 (a compatible evolution): customer dropped, a field nobody declared added.
V2 = {
    **V1,
    "fields": [f for f in V1["fields"] if f["name"] != "customer"]
    + [{"name": "note", "type": "string", "default": ""}],
}


@pytest.fixture
def avro_case(case, schema_registry):
    case.write_config(**DECLARATION, key="bigint")
    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    return case


def test_an_avro_topic_lands_typed_from_its_declaration_and_its_writer_schemas(avro_case, schema_registry):
    case = avro_case
    registry = SchemaRegistry(schema_registry)
    v1 = registry.register(f"{case.topic}-value", V1)
    v2 = registry.register(f"{case.topic}-value", V2)
    assert v1 != v2
    p1, p2 = fastavro.parse_schema(V1), fastavro.parse_schema(V2)
    # i = 3: NaN, which an Avro double may hold, and a double precision column stores.
    good = [
        (str(i).encode(), encode(v1, p1, click(i, score=float("nan") if i == 3 else -0.125)))
        for i in range(1, 5)
    ]
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
        "select kafka_key, click_id, url, ts, customer, n_items, price, kind, tags, attrs, ok, day, score, "
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
        True,
        date(2026, 2, 28),
        -0.125,
        1,
    )
    assert rows[2][12] != rows[2][12]  # NaN: an Avro double may hold it, and double precision stores it
    assert rows[4][4] is None  # written under v2, which has no customer
    reasons = sorted(r[2] for r in case.rejected())
    assert len(reasons) == len(poison)
    for _, _, reason in poison:
        assert sum(r.startswith(reason) for r in reasons) == 1, (reason, reasons)
    types = case.column_types()
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
    assert "reads avro, and no schema registry is configured" in done.stderr
    assert avro_case.query("select count(*) from eosflow.plans where pipeline = %s", avro_case.name) == [(0,)]


def test_an_avro_topic_into_a_kafka_sink_comes_out_as_avro_of_the_declared_columns(
    avro_case, schema_registry
):
    import io
    import json

    from tests.kafka_reader import read_all, sources

    case = avro_case
    case.as_kafka_sink()
    registry = SchemaRegistry(schema_registry)
    v1 = registry.register(f"{case.topic}-value", V1)
    p1 = fastavro.parse_schema(V1)
    good = [(str(i).encode(), encode(v1, p1, click(i))) for i in range(1, 4)]
    _produce(case.settings.bootstrap_servers, case.topic, good + [(b"4", b"not avro")])

    assert case.ingest().outcome == "committed"

    out = read_all(case.settings, case.output_topic)
    assert len(out) == 3 and set(sources(out).values()) == {1}
    schema_id = int.from_bytes(out[0].value()[1:5], "big")
    assert out[0].value()[0] == 0 and schema_id != v1  # the declared columns' own schema, registered
    body = registry.get_json(f"/schemas/ids/{schema_id}")
    reader = fastavro.parse_schema(json.loads(body["schema"]))
    (one,) = [m for m in out if m.key() == b"1"]  # the source key, byte for byte
    first = fastavro.schemaless_reader(io.BytesIO(one.value()[5:]), reader, reader)
    assert first["click_id"] == uuid.UUID(int=1) and first["price"] == Decimal("9999999999.99")
    assert first["ts"] == datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC) and first["day"] == date(
        2026, 2, 28
    )
    assert json.loads(first["attrs"]) == {"w": 1.5} and first["tags"] == ["sale", 'say "hi"', "{braces}"]
    (dead,) = read_all(case.settings, f"{case.output_topic}.rejected")
    assert dead.value() == b"not avro"
