"""The loop a competent engineer writes for exactly-once Kafka -> Postgres, in one process.

`assign` (no consumer group) from positions stored in Postgres, read_committed; the orders declaration
checked the way such an engineer would, with a msgspec struct decoded strictly in C (its own checks,
not eosflow's: a faster check in eosflow must not speed up its peer too); the valid rows COPYed into
the keyed table and the rejected ones into a table of their own, and the new positions upserted, in
ONE Postgres transaction per batch: offsets stored with the output, Kafka's third consumer semantics.
A crash anywhere re-reads from the stored positions and writes each record once.

Runs as `python -m eosflow_dev.bench.competent --topic T --table bench.X --partitions P`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

import msgspec
import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from psycopg import sql

from eosflow_dev.bench.handwritten import IDLE_LIMIT_S, LoopStalled
from eosflow_dev.bench.measure import emit_result
from eosflow_dev.bench.targets import COLUMNS, qualified
from eosflow_dev.stack import settings as settings_mod

BATCH = 20_000  # records per Postgres transaction: large enough that the commit is not the cost
MAX_VALUE_BYTES = 65_536


class Order(msgspec.Struct):
    """The orders declaration (pipelines.yml), as a struct a competent engineer writes for it."""

    event_id: uuid.UUID
    event_type: Literal["order_created", "order_paid", "order_shipped", "order_cancelled"]
    event_time: datetime
    order_id: str
    customer_id: str
    amount_cents: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
    currency: Annotated[str, msgspec.Meta(pattern="^[A-Z]{3}$")]
    schema_version: Literal[1]


def check_order(decode, value: bytes | None) -> tuple[str | None, tuple | None]:
    """(None, the typed columns) or (why the record is rejected, None)."""
    if value is None:
        return "null value", None
    if len(value) > MAX_VALUE_BYTES:
        return "oversized", None
    try:
        o = decode(value)
    except msgspec.ValidationError as exc:
        return f"invalid: {exc}", None
    except msgspec.DecodeError:
        return "not JSON", None
    if o.event_time.tzinfo is None:
        return "invalid: event_time without a zone", None
    typed = (
        o.event_id,
        o.event_type,
        o.event_time,
        o.order_id,
        o.customer_id,
        o.amount_cents,
        o.currency,
        o.schema_version,
    )
    return None, typed


def _positions_table(table: str) -> str:
    return f"{table}_positions"


def prepare(conn: psycopg.Connection, table: str) -> None:
    """The positions and rejected tables beside the target (which the bench made)."""
    conn.execute(
        sql.SQL(
            "create table if not exists {} (topic text, partition int, next_offset bigint not null, "
            "primary key (topic, partition))"
        ).format(qualified(_positions_table(table)))
    )
    conn.execute(
        sql.SQL(
            "create table if not exists {} (kafka_topic text, kafka_partition int, kafka_offset bigint, "
            "raw_value bytea, error text, primary key (kafka_topic, kafka_partition, kafka_offset))"
        ).format(qualified(f"{table}_rejected"))
    )


def run(bootstrap: str, dsn: str, topic: str, table: str, partitions: int, batch: int = BATCH) -> dict:
    decode = msgspec.json.Decoder(Order).decode
    copy_rows = sql.SQL("copy {} ({}) from stdin").format(
        qualified(table), sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
    )
    copy_rejected = sql.SQL(
        "copy {} (kafka_topic, kafka_partition, kafka_offset, raw_value, error) from stdin"
    ).format(qualified(f"{table}_rejected"))
    upsert = sql.SQL(
        "insert into {} (topic, partition, next_offset) values (%s, %s, %s) "
        "on conflict (topic, partition) do update set next_offset = excluded.next_offset"
    ).format(qualified(_positions_table(table)))
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused-with-assign",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    written = rejected = batches = 0
    started = last_record = time.monotonic()
    with psycopg.connect(dsn) as conn:
        prepare(conn, table)
        conn.commit()
        stored = dict(
            ((t, p), o)
            for t, p, o in conn.execute(
                sql.SQL("select topic, partition, next_offset from {}").format(
                    qualified(_positions_table(table))
                )
            )
        )
        consumer.assign(
            [TopicPartition(topic, p, stored.get((topic, p), OFFSET_BEGINNING)) for p in range(partitions)]
        )
        at_end: set[int] = set()
        try:
            while len(at_end) < partitions:
                rows, bad, ends = [], [], {}
                for msg in consumer.consume(num_messages=batch, timeout=1.0):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            at_end.add(msg.partition())
                            continue
                        raise RuntimeError(f"consumer error on {topic}: {err.str()}")
                    at_end.discard(msg.partition())
                    ends[msg.partition()] = msg.offset() + 1
                    error, typed = check_order(decode, msg.value())
                    if error is not None:
                        bad.append((topic, msg.partition(), msg.offset(), msg.value(), error))
                        continue
                    _, ms = msg.timestamp()
                    key = msg.key()
                    headers = msg.headers() or []
                    rows.append(
                        (
                            topic,
                            msg.partition(),
                            msg.offset(),
                            datetime.fromtimestamp(ms / 1000, UTC),
                            key.decode("utf-8", "replace") if key is not None else None,
                            json.dumps([{"key": k, "value": v.decode()} for k, v in headers])
                            if headers
                            else "[]",
                            *typed,
                            "competent",
                            "v1",
                        )
                    )
                if not ends:
                    if time.monotonic() - last_record > IDLE_LIMIT_S:
                        raise LoopStalled(
                            f"no record from {topic} for {IDLE_LIMIT_S:.0f} s after {written:,}"
                        )
                    continue
                with conn.transaction(), conn.cursor() as cur:
                    with cur.copy(copy_rows) as copy:
                        for row in rows:
                            copy.write_row(row)
                    if bad:
                        with cur.copy(copy_rejected) as copy:
                            for row in bad:
                                copy.write_row(row)
                    cur.executemany(upsert, [(topic, p, o) for p, o in sorted(ends.items())])
                written += len(rows)
                rejected += len(bad)
                batches += 1
                last_record = time.monotonic()
        finally:
            consumer.close()
    return {"loop_s": time.monotonic() - started, "rows": written, "rejected": rejected, "batches": batches}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eosflow_dev.bench.competent")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--batch", type=int, default=BATCH)
    args = parser.parse_args(argv)
    s = settings_mod.load()
    emit_result(
        run(s.bootstrap_servers, s.warehouse_dsn, args.topic, args.table, args.partitions, args.batch)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
