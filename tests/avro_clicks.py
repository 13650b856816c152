"""The Avro clicks topic the Avro tests share: a writer schema with every kind of field a declaration
reads (logical types, a nested record in a union, an enum, an array, a map), its declaration, and records."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

from tests.clicks import click_columns

WRITER = {
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
        {"name": "ok", "type": "boolean"},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "score", "type": "double"},
    ],
}
DECLARATION = {
    "format": "avro",
    "columns": click_columns("attrs"),
    "business_key": "click_id",
}


def click(i: int = 1, **changes: object) -> dict:
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
        "ok": True,
        "day": date(2026, 2, 28),
        "score": -0.125,
    } | changes
