"""The clicks declaration the declared-pipeline tests share (JSON and Avro): every column type and rule."""

from __future__ import annotations


def click_columns(document: str) -> list[dict]:
    """The clicks columns, their jsonb column named `document`."""
    return [
        {"name": "click_id", "type": "uuid", "required": True},
        {"name": "url", "type": "text", "required": True, "pattern": "^https?://"},
        {"name": "ts", "type": "timestamptz", "required": True},
        {"name": "customer", "type": "text", "source": "$.customer.id"},
        {"name": "n_items", "type": "bigint", "min": 0},
        {"name": "price", "type": "numeric(12,2)"},
        {"name": "kind", "type": "text", "enum": ["view", "add", "buy"]},
        {"name": "tags", "type": "text[]"},
        {"name": document, "type": "jsonb"},
        {"name": "ok", "type": "boolean"},
        {"name": "day", "type": "date"},
        {"name": "score", "type": "double"},
    ]
