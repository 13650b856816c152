"""`format: avro | protobuf` for a publisher: the outbox's columns as a schema registered under
`<topic>-value`, each row in the Confluent wire format, read back by a consumer that knows only the
registry (fastavro, protobuf's runtime); a row the format cannot carry is a dead letter with the reason."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import fastavro
import pytest

from eosflow.schema.avro import SchemaRegistry
from tests.integration.test_publish import _headers, _outbox_table
from tests.kafka_reader import read_all
from tests.protobuf_reader import message_class

pytestmark = pytest.mark.integration

COLUMNS = (
    "id bigint primary key, aggregate text not null, amount numeric(12,2), x double precision, "
    "at timestamptz, d date, tags text[], doc jsonb, blob bytea, u uuid, i interval, loose numeric"
)
ROWS = [
    "insert into {t} values (1, 'a', 12.5, 1.5, '2026-01-02 03:04:05.000006+00', '2026-02-28', "
    "'{{x,y}}', '{{\"k\": [1, 2.5]}}', '\\x00ff', '0b9a4f3e-5c6d-4e7f-8a9b-0c1d2e3f4a5b', "
    "'1 mon 2 days', 3.14159265358979323846)",
    "insert into {t} (id, aggregate) values (2, 'b')",
    "insert into {t} (id, aggregate, amount) values (3, 'c', 'NaN')",
    "insert into {t} (id, aggregate, at) values (4, 'd', 'infinity')",
]
AT = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)


def _registered(outbox, value: bytes) -> dict:
    schema_id = int.from_bytes(value[1:5], "big")
    return SchemaRegistry(outbox.settings.registry).get_json(f"/schemas/ids/{schema_id}")


def _published_and_dead(outbox) -> tuple[list, dict[int, str]]:
    summary = outbox.publish()
    assert (summary.rows, summary.rejected) == (4, 2)
    dead = read_all(outbox.settings, outbox.publisher.rejected_topic)
    reasons = {int(_headers(m)["eosflow-row-id"]): _headers(m)["eosflow-error"].decode() for m in dead}
    assert sorted(reasons) == [3, 4]
    return read_all(outbox.settings, outbox.topic), reasons


def test_an_outbox_published_as_avro_reads_back_with_the_registered_schema(case):
    outbox = _outbox_table(case, COLUMNS, ROWS, format="avro")
    published, reasons = _published_and_dead(outbox)
    assert "column 'amount' holds NaN" in reasons[3] and "column 'at' holds infinity" in reasons[4]
    answer = _registered(outbox, published[0].value())
    assert answer.get("schemaType", "AVRO") == "AVRO"
    reader = fastavro.parse_schema(json.loads(answer["schema"]))
    rows = {
        r["id"]: r
        for r in (fastavro.schemaless_reader(io.BytesIO(m.value()[5:]), reader, reader) for m in published)
    }
    one = rows[1]
    assert (one["aggregate"], one["amount"], one["x"], one["at"], one["d"]) == (
        "a",
        Decimal("12.50"),
        1.5,
        AT,
        date(2026, 2, 28),
    )
    assert one["tags"] == ["x", "y"] and one["doc"] == '{"k":[1,2.5]}' and one["blob"] == b"\x00\xff"
    assert one["u"] == uuid.UUID("0b9a4f3e-5c6d-4e7f-8a9b-0c1d2e3f4a5b") and one["i"] == "P1M2D"
    assert one["loose"] == "3.14159265358979323846"  # an unconstrained numeric: its exact digits as text
    assert rows[2] == {"id": 2, "aggregate": "b"} | dict.fromkeys(
        ("amount", "x", "at", "d", "tags", "doc", "blob", "u", "i", "loose")
    )


def test_an_outbox_published_as_protobuf_reads_back_with_the_registered_descriptor(case):
    outbox = _outbox_table(case, COLUMNS, ROWS, format="protobuf")
    published, _ = _published_and_dead(outbox)
    answer = _registered(outbox, published[0].value())
    assert answer["schemaType"] == "PROTOBUF"
    cls = message_class(answer["schema"])
    rows = {m.id: m for m in (cls.FromString(v.value()[6:]) for v in published)}  # header and index [0]
    one = rows[1]
    assert (one.aggregate, one.amount, one.x, one.at.ToDatetime(tzinfo=UTC), one.d) == (
        "a",
        "12.50",
        1.5,
        AT,
        "2026-02-28",
    )
    assert list(one.tags) == ["x", "y"] and one.blob == b"\x00\xff" and one.i == "P1M2D"
    assert not rows[2].HasField("amount") and not rows[2].HasField("at") and list(rows[2].tags) == []


def test_a_format_without_a_registry_is_refused_before_anything_is_published(case, monkeypatch):
    import dataclasses

    from eosflow.errors import PipelineConfigError

    outbox = _outbox_table(case, COLUMNS, ROWS[:1], format="avro")
    outbox.settings = dataclasses.replace(outbox.settings, registry_port=0, schema_registry_url="")
    with pytest.raises(PipelineConfigError, match="writes avro, and no schema registry is configured"):
        outbox.publish()
    assert read_all(case.settings, outbox.topic) == []
