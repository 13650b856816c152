"""The bench's target tables: the shape of eosflow's output, created, checked and dropped.

Every measurement that writes rows writes into a table made from the project's orders declaration
(the columns and types eosflow's target has, and the (topic, partition, offset) primary key), so each
pays for the same key and the same types as eosflow's own target (which is partitioned by offset
range besides). Tables live in schema `bench`, one per measurement and run.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from eosflow import pipelines
from eosflow.schema import ddl
from eosflow.schema.declaration import parse_schema
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.settings import StackSettings

SCHEMA = "bench"

# raw.orders' columns in order: what the COPY file, the hand-written loop and the streaming job write.
COLUMNS: tuple[str, ...] = (
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "kafka_key",
    "kafka_headers",
    "event_id",
    "event_type",
    "event_time",
    "order_id",
    "customer_id",
    "amount_cents",
    "currency",
    "schema_version",
    "batch_id",
    "transform_version",
)

# Order-independent digest of what a row says (coordinates and the event's fields): equal digests
# mean equal sets of rows, whichever way they were written. batch_id, the Kafka timestamp and the
# headers are left out: they legitimately differ between writers.
_FINGERPRINT = """
select count(*),
       count(distinct event_id),
       coalesce(sum(hashtextextended(concat_ws('|', kafka_topic, kafka_partition, kafka_offset, event_id,
           event_type, event_time, order_id, customer_id, amount_cents, currency, schema_version), 0)), 0)
from {}
"""


@dataclass(frozen=True)
class TableCheck:
    rows: int
    distinct_events: int
    fingerprint: str  # a decimal sum of row hashes; compare for equality only


def qualified(table: str) -> sql.Composed:
    schema, _, name = table.rpartition(".")
    return sql.Identifier(schema or SCHEMA, name)


def ensure_schema(conn: psycopg.Connection) -> None:
    conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(SCHEMA)))


def create_like_orders(conn: psycopg.Connection, table: str, settings: StackSettings | None = None) -> None:
    """A fresh, empty table shaped like eosflow's orders target, primary key included (not partitioned)."""
    s = settings or settings_mod.load()
    schema = parse_schema(pipelines.declaration(s.root / "pipelines.yml", "orders"), "orders")
    name = f"{SCHEMA}.{table.rpartition('.')[2]}"
    ensure_schema(conn)
    conn.execute(sql.SQL("drop table if exists {}").format(qualified(table)))
    conn.execute(ddl.create_table(name, schema, keyed=False))
    conn.execute(
        sql.SQL("alter table {} add primary key (kafka_topic, kafka_partition, kafka_offset)").format(
            qualified(table)
        )
    )


def check(conn: psycopg.Connection, table: str) -> TableCheck:
    rows, distinct, digest = conn.execute(sql.SQL(_FINGERPRINT).format(qualified(table))).fetchone()
    return TableCheck(int(rows), int(distinct), str(digest))


def drop(conn: psycopg.Connection, *tables: str) -> None:
    for table in tables:
        conn.execute(sql.SQL("drop table if exists {}").format(qualified(table)))


def exists(conn: psycopg.Connection, table: str) -> bool:
    return conn.execute("select to_regclass(%s) is not null", (table,)).fetchone()[0]
