"""The demo event stream: order lifecycle events as JSON, reproducible from a seed.

Schema (schema_version 1), one JSON object per Kafka record value:

| field          | type    | notes                                                        |
|----------------|---------|--------------------------------------------------------------|
| event_id       | string  | UUID, unique per event: the business key checked by I6       |
| event_type     | string  | order_created, order_paid, order_shipped, order_cancelled    |
| event_time     | string  | ISO-8601 UTC with milliseconds, when the event happened      |
| order_id       | string  | "ord-" + 10 digits                                           |
| customer_id    | string  | "cus-" + 6 digits; also the record key (spreads partitions)  |
| amount_cents   | integer | > 0                                                          |
| currency       | string  | ISO-4217 code                                                |
| schema_version | integer | 1                                                            |
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

SCHEMA_VERSION = 1
EVENT_TYPES = ("order_created", "order_paid", "order_shipped", "order_cancelled")
_TYPE_WEIGHTS = (40, 30, 25, 5)
CURRENCIES = ("EUR", "USD", "GBP")


@dataclass(frozen=True, slots=True)
class Event:
    event_id: str
    key: bytes
    value: bytes | None  # None: a tombstone (the lab's change streams send Debezium's)


def generate(seed: int, count: int, start_time: datetime | None = None) -> Iterator[Event]:
    """`count` events; the same seed gives the same events, different seeds give disjoint event_ids."""
    rng = random.Random(seed)
    clock = start_time or datetime(2026, 1, 1, tzinfo=UTC)
    for _ in range(count):
        clock += timedelta(milliseconds=rng.randint(1, 250))
        customer = f"cus-{rng.randrange(1_000_000):06d}"
        event_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        body = {
            "event_id": event_id,
            "event_type": rng.choices(EVENT_TYPES, _TYPE_WEIGHTS)[0],
            "event_time": clock.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "order_id": f"ord-{rng.randrange(10**10):010d}",
            "customer_id": customer,
            "amount_cents": rng.randint(100, 250_000),
            "currency": rng.choice(CURRENCIES),
            "schema_version": SCHEMA_VERSION,
        }
        yield Event(event_id, customer.encode(), json.dumps(body, separators=(",", ":")).encode())
