"""The training run that records Spark's class-data-sharing archive (eosflow.spark.cds.record runs it).

A small ingestion-shaped job, a Python task checking Arrow batches of Kafka-shaped records, then exit:
the JVM writes the classes it loaded to the archive named on the command line. Its own records (order
events as JSON, one in ten not JSON), so it needs neither Kafka, Postgres nor the dev tools.
"""

from __future__ import annotations

import json
import random
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from eosflow import settings as settings_mod
from eosflow.schema.declaration import parse_schema
from eosflow.sources.batches import InMemoryRecords, record_batch
from eosflow.spark import session
from eosflow.spark.cds import QUIET
from eosflow.transform import BatchCheck

_DECLARED = {
    "columns": [
        {"name": "event_id", "type": "uuid", "required": True},
        {"name": "event_time", "type": "timestamptz"},
        {"name": "amount_cents", "type": "bigint", "min": 1},
        {"name": "currency", "type": "text", "pattern": "^[A-Z]{3}"},
        {"name": "order_id", "type": "text"},
    ]
}


def records(count: int, seed: int = 1) -> list[tuple]:
    """Kafka-shaped rows of order events; one in ten is a value the checks reject."""
    rng = random.Random(seed)
    clock = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(count):
        clock += timedelta(milliseconds=rng.randint(1, 250))
        body = {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "event_time": clock.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "order_id": f"ord-{rng.randrange(10**10):010d}",
            "amount_cents": rng.randint(100, 250_000),
            "currency": rng.choice(("EUR", "USD", "GBP")),
        }
        value = json.dumps(body).encode() if i % 10 else b"not json"
        key = f"cus-{rng.randrange(1_000_000):06d}".encode()
        rows.append((key, value, "t", i % 2, i, datetime(2026, 1, 1, tzinfo=UTC), [("h", b"v")]))
    return rows


def training_run(out: Path) -> None:
    recording = f"-XX:ArchiveClassesAtExit={out} {QUIET}"
    spark = session.get_spark(settings_mod.load(), "eosflow-cds-training", class_archive=recording)
    check = BatchCheck(
        pipeline="p",
        batch_id="b",
        transform_version="v",
        max_value_bytes=4096,
        schema=parse_schema(_DECLARED, "cds training"),
    )

    def count(batches):
        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"n": [sum(check(b).num_rows for b in batches)]})

    rows = records(2000)
    counted = InMemoryRecords(spark, [record_batch(rows)]).map(count, "n long").collect()
    assert sum(r.n for r in counted) == len(rows), counted
    spark.stop()


if __name__ == "__main__":
    training_run(Path(sys.argv[1]))
