"""A Python transform for records no declaration can read: pipe-separated text lines.

A value is `click_id|url|unix_ms|price_cents`, e.g. `6f1c...|https://shop.example/p/1|1767225600000|1250`.
The function turns a batch of them into the declared columns (click_id, url, ts, price), and names
a reason for each line it cannot read; eosflow then holds the rows to the declaration as it does
for JSON records. Declared in pipelines.yml as `transform: eosflow.examples.pipe_clicks:parse`, or
by the entry point's name, `transform: pipe_clicks`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse(batch: pa.RecordBatch) -> pa.RecordBatch:
    rows: list[dict] = []
    for value in batch.column("value").to_pylist():
        rows.append(_row(value))
    return pa.RecordBatch.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("click_id", pa.string()),
                ("url", pa.string()),
                ("ts", pa.timestamp("us", tz="UTC")),
                ("price", pa.decimal128(12, 2)),
                ("error", pa.string()),
            ]
        ),
    )


def _row(value: bytes | None) -> dict:
    empty = {"click_id": None, "url": None, "ts": None, "price": None}
    if value is None:
        return empty | {"error": "no value"}
    parts = value.decode("utf-8", "replace").split("|")
    if len(parts) != 4:
        return empty | {"error": f"expected 4 fields separated by |, got {len(parts)}"}
    click_id, url, millis, cents = parts
    if not millis.isdigit() or not cents.lstrip("-").isdigit():
        return empty | {"error": "unix_ms and price_cents must be whole numbers"}
    return {
        "click_id": click_id,
        "url": url,
        "ts": _EPOCH + timedelta(milliseconds=int(millis)),  # beyond year 9999 raises: eosflow rejects it
        "price": Decimal(int(cents)) / 100,
        "error": None,
    }
