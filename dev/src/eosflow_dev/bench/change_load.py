"""Load the change-stream bench's topic: a customers table's changes as Debezium's JsonConverter writes them.

N changes over K keys (schemas.enable=false: no schema block), keyed `{"id": n}` and partitioned by the key
as Debezium's Java producer does (murmur2): first an insert per key, then a seeded mix of updates (70% of
N), deletes (10%, each followed by its tombstone) and re-inserts of deleted keys (the rest). `source.lsn`
strictly increases, as Postgres' WAL does. The generator also keeps what the source table holds at the
end, which every measurement's state table must equal.

Produced fast and plainly: confluent-kafka, idempotent, batched; not transactional (Debezium's records
are without KIP-618's exactly-once source support, and read_committed reads them the same).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import msgspec
import psycopg
from confluent_kafka import Producer
from psycopg import sql

from eosflow.kafka_admin import ensure_topic
from eosflow_dev.stack.settings import StackSettings

Log = Callable[[str], None]
UPDATES, DELETES = 0.70, 0.10  # of all changes; the first K are inserts, re-inserts are the rest
T0_MS = 1_764_151_200_000  # 2025-11-26 10:00 UTC: the source's clock at the first change
FIRST_LSN = 0x1_6B37_4D48
TIERS = ("free", "silver", "gold", "platinum")
# The customers table, as the state tables hold it (and the generator's expected rows).
TABLE_COLUMNS = (
    ("id", "bigint not null primary key"),
    ("email", "text not null"),
    ("balance", "numeric(12,2)"),
    ("updated_at", "timestamptz"),
    ("profile", "jsonb"),
)
# The same table as a change stream declares it: Debezium's JSON forms read as the declared types (the change
# bench's pipelines and the delivery lab's change modes).
DECLARED_COLUMNS = [
    {"name": "id", "type": "bigint", "required": True},
    {"name": "email", "type": "text", "required": True},
    {"name": "balance", "type": "numeric(12,2)"},
    {"name": "updated_at", "type": "timestamptz"},
    {"name": "profile", "type": "jsonb"},
]
# A state table's digest: order-independent, over the row's values as Postgres types print them (UTC).
DIGEST = """
select count(*),
       coalesce(sum(hashtextextended(concat_ws('|', id, coalesce(email, '~'), coalesce(balance::text, '~'),
           coalesce(updated_at::text, '~'), coalesce(profile::text, '~')), 0)), 0)
from {}
"""


class ChangeLoadError(RuntimeError):
    """The topic does not hold the changes the bench generated."""


Row = tuple[int, str, str, int, str]  # id, email, balance (text), updated_at (us since 1970), profile (JSON)


@dataclass
class ChangeWorkload:
    """What was loaded and what the source holds afterwards."""

    topic: str
    partitions: int
    changes: int  # c/u/d events (the tombstones not counted)
    keys: int
    seed: int
    records: int = 0  # Kafka records: the changes and the tombstones
    payload_bytes: int = 0  # keys + values
    load_s: float = 0.0
    ops: dict[str, int] = field(default_factory=dict)
    final: dict[int, Row] = field(default_factory=dict)  # the source table at the end, by id

    @property
    def payload_mb(self) -> float:
        return self.payload_bytes / 1_000_000


def plan_counts(changes: int, keys: int) -> dict[str, int]:
    """How many of each op: K inserts, 70% updates, 10% deletes, re-inserts the rest (so K is 10% to 20%
    of the changes: 1M changes over 100k keys, 4M over 400k)."""
    if keys < 1 or changes < keys:
        raise ValueError(f"need 1 <= keys <= changes, got {keys:,} keys for {changes:,} changes")
    updates, deletes = round(changes * UPDATES), round(changes * DELETES)
    reinserts = changes - keys - updates - deletes
    if reinserts < 0:
        raise ValueError(
            f"{keys:,} keys leave no room for 70% updates and 10% deletes in {changes:,} changes: "
            f"use at most {changes - updates - deletes:,} keys"
        )
    if reinserts > deletes:  # a re-insert brings back a deleted key: never more of them than deletes
        raise ValueError(
            f"{keys:,} keys leave {reinserts:,} re-inserts in {changes:,} changes, more than its "
            f"{deletes:,} deletes: use at least {changes - updates - 2 * deletes:,} keys"
        )
    return {"c": keys, "u": updates, "d": deletes, "re": reinserts}


def generate(changes: int, keys: int, seed: int, final: dict[int, Row]) -> Iterator[tuple[str, Row, int]]:
    """(op, row image, lsn) per change, in the source's order; `final` ends as the table's rows."""
    rng = random.Random(seed)
    counts = plan_counts(changes, keys)
    lsn = FIRST_LSN
    version: dict[int, int] = {}

    def image(key: int, step: int) -> Row:
        v = version[key] = version.get(key, 0) + 1
        cents = rng.randrange(0, 10**9)
        profile = msgspec.json.encode(
            {"tier": rng.choice(TIERS), "visits": rng.randrange(0, 5_000), "newsletter": rng.random() < 0.4}
        ).decode()
        at_us = (T0_MS + step) * 1000 + rng.randrange(1000)
        return key, f"customer{key}.v{v}@example.com", f"{cents // 100}.{cents % 100:02d}", at_us, profile

    live: list[int] = []  # swap-remove lists: a random live (or deleted) key in O(1)
    where: dict[int, int] = {}
    dead: list[int] = []
    dead_where: dict[int, int] = {}

    def take(items: list[int], index: dict[int, int], i: int) -> int:
        key, last = items[i], items[-1]
        items[i], index[last] = last, i
        items.pop()
        del index[key]
        return key

    def put(items: list[int], index: dict[int, int], key: int) -> None:
        index[key] = len(items)
        items.append(key)

    for step in range(changes):
        lsn += rng.randrange(40, 400)
        if step < keys:
            key = step + 1
            put(live, where, key)
            row = final[key] = image(key, step)
            yield "c", row, lsn
            continue
        # Drawn by what is left of each op, so the counts come out exact; an op with no key to act on waits.
        u = counts["u"] if live else 0
        d = counts["d"] if live else 0
        re_ = counts["re"] if dead else 0
        pick = rng.random() * (u + d + re_)
        op = "u" if pick < u else "d" if pick < u + d else "re"
        counts[op] -= 1
        if op == "u":
            key = live[rng.randrange(len(live))]
            row = final[key] = image(key, step)
            yield "u", row, lsn
        elif op == "d":
            key = take(live, where, rng.randrange(len(live)))
            put(dead, dead_where, key)
            del final[key]
            yield "d", (key, "", "", 0, ""), lsn
        else:
            key = take(dead, dead_where, rng.randrange(len(dead)))
            put(live, where, key)
            row = final[key] = image(key, step)
            yield "c", row, lsn


def envelope(op: str, row: Row, lsn: int, previous_lsn: int, tx: int) -> bytes:
    """Debezium 3.6's JSON value (no schema block) for a change of public.customers."""
    key, email, balance, at_us, profile = row
    ts = at_us // 1000
    image = {"id": key, "email": email, "balance": balance, "updated_at": at_us, "profile": profile}
    body = {
        "before": {"id": key, "email": None, "balance": None, "updated_at": None, "profile": None}
        if op == "d"
        else None,  # REPLICA IDENTITY DEFAULT: an update's before is absent, a delete's holds the key
        "after": None if op == "d" else image,
        "source": {
            "version": "3.6.1.Final",
            "connector": "postgresql",
            "name": "bench",
            "ts_ms": ts,
            "snapshot": "false",
            "db": "source",
            "sequence": f'["{previous_lsn}","{lsn}"]',
            "ts_us": ts * 1000,
            "ts_ns": ts * 1_000_000,
            "schema": "public",
            "table": "customers",
            "txId": tx,
            "lsn": lsn,
            "xmin": None,
        },
        "transaction": None,
        "op": op,
        "ts_ms": ts + 3,
        "ts_us": (ts + 3) * 1000,
        "ts_ns": (ts + 3) * 1_000_000,
    }
    return msgspec.json.encode(body)


def load_changes(
    settings: StackSettings, topic: str, partitions: int, changes: int, keys: int, seed: int, log: Log
) -> ChangeWorkload:
    """Create `topic` and produce the changes (and tombstones) to it; returns what the source holds."""
    ensure_topic(settings.bootstrap_servers, topic, partitions, log=lambda msg: None)
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",  # the Java producer's: where Debezium's records land
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
        }
    )
    work = ChangeWorkload(topic, partitions, changes, keys, seed)
    failed: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    def send(key: bytes, value: bytes | None) -> None:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=delivered)
                return
            except BufferError:  # the local queue is full: let librdkafka send some
                producer.poll(0.05)

    started = last_log = time.monotonic()
    previous, ops = FIRST_LSN, {"c": 0, "u": 0, "d": 0}
    for i, (op, row, lsn) in enumerate(generate(changes, keys, seed, work.final)):
        key = b'{"id":%d}' % row[0]
        value = envelope(op, row, lsn, previous, 700 + i // 3)
        previous = lsn
        ops[op] += 1
        send(key, value)
        work.payload_bytes += len(key) + len(value)
        work.records += 1
        if op == "d":
            send(key, None)  # Debezium's tombstone, for log compaction
            work.payload_bytes += len(key)
            work.records += 1
        if i % 10_000 == 0:
            producer.poll(0)
            if time.monotonic() - last_log > 10:
                log(f"  load: {i:,}/{changes:,} changes ({i / changes:.0%})")
                last_log = time.monotonic()
    left = producer.flush(120)
    work.load_s = time.monotonic() - started
    work.ops = ops
    if left or failed:
        raise ChangeLoadError(
            f"loading {topic}: {left:,} records not delivered, {len(failed):,} failed "
            f"({failed[:1]}); is the broker healthy? see `eosflow stack logs kafka`"
        )
    return work


def write_expected(conn: psycopg.Connection, table: str, final: dict[int, Row]) -> None:
    """The source's rows at the end, typed as the state tables hold them, for the digest to compare."""
    create_customers(conn, table)
    copy = sql.SQL("copy {} (id, email, balance, updated_at, profile) from stdin").format(_ident(table))
    with conn.cursor() as cur, cur.copy(copy) as out:
        for key, email, balance, at_us, profile in final.values():
            out.write_row((key, email, balance, _instant(at_us), profile))


def create_customers(conn: psycopg.Connection, table: str, extra: str = "") -> None:
    """A fresh table of the customers' columns (`extra`: more column definitions after them)."""
    columns = ", ".join(f"{name} {kind}" for name, kind in TABLE_COLUMNS) + (f", {extra}" if extra else "")
    conn.execute(sql.SQL("drop table if exists {}").format(_ident(table)))
    conn.execute(sql.SQL("create table {} (" + columns + ")").format(_ident(table)))


def digest(conn: psycopg.Connection, table: str) -> tuple[int, str]:
    """(rows, digest) of a table of the customers' columns; equal digests, equal rows."""
    conn.execute("set timezone = 'UTC'")
    rows, value = conn.execute(sql.SQL(DIGEST).format(_ident(table))).fetchone()
    return int(rows), str(value)


def _instant(at_us: int) -> str:
    """Microseconds since 1970 as an ISO instant Postgres reads exactly."""
    from datetime import UTC, datetime, timedelta

    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=at_us)).isoformat()


def _ident(table: str) -> sql.Identifier:
    return sql.Identifier(*table.split("."))
