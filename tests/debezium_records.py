"""Change records shaped as Debezium's JsonConverter writes them with schemas.enable (key and value each a
schema block and a payload), for tests that need a table topic without running Connect. The shapes follow
the record Debezium 3.6.1 wrote in tests/unit/data/debezium_change_with_schema.json."""

from __future__ import annotations

import json

# Connect field schemas by declared type, as Debezium sends them (column.propagate.source.type for numeric).
FIELDS = {
    "bigint": {"type": "int64"},
    "text": {"type": "string"},
    "numeric(12,2)": {
        "type": "string",
        "parameters": {
            "__debezium.source.column.type": "NUMERIC",
            "__debezium.source.column.length": "12",
            "__debezium.source.column.scale": "2",
        },
    },
    "boolean": {"type": "boolean"},
}


class Table:
    """One source table's change records: `columns` maps a column to its declared type; `key` is the
    primary key's columns."""

    def __init__(self, topic: str, columns: dict[str, str], key: tuple[str, ...] = ("id",)) -> None:
        self.topic, self.columns, self.key = topic, dict(columns), key
        self.lsn = 1000

    def _fields(self, names) -> list[dict]:
        return [FIELDS[self.columns[n]] | {"optional": n not in self.key, "field": n} for n in names]

    def key_bytes(self, row: dict) -> bytes:
        schema = {
            "type": "struct",
            "fields": self._fields(self.key),
            "optional": False,
            "name": f"{self.topic}.Key",
        }
        return json.dumps({"schema": schema, "payload": {k: row[k] for k in self.key}}).encode()

    def change(self, op: str, row: dict) -> tuple[bytes, bytes]:
        """(key, value) of one change: `row` is the after image (the before image for op d)."""
        self.lsn += 10
        image = {
            "type": "struct",
            "fields": self._fields(self.columns),
            "optional": True,
            "name": f"{self.topic}.Value",
        }
        schema = {
            "type": "struct",
            "fields": [
                image | {"field": "before"},
                image | {"field": "after"},
                {
                    "type": "struct",
                    "fields": [{"type": "int64", "optional": True, "field": "lsn"}],
                    "optional": False,
                    "field": "source",
                },
                {"type": "string", "optional": False, "field": "op"},
            ],
            "optional": False,
            "name": f"{self.topic}.Envelope",
        }
        payload = {
            "before": row if op == "d" else None,
            "after": None if op == "d" else row,
            "source": {"lsn": self.lsn, "ts_ms": 1764151200000 + self.lsn},
            "op": op,
        }
        return self.key_bytes(row), json.dumps({"schema": schema, "payload": payload}).encode()
