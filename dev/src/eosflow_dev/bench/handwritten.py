"""The hand-written alternative: a confluent-kafka consumer loop inserting into Postgres in batches.

What a typical engineer writes: poll a batch, parse each JSON value, INSERT the batch with psycopg's
`executemany`, commit Postgres, then commit the Kafka offsets synchronously. At-least-once: a crash
between the two commits re-inserts the batch (here the primary key would then stop the loop).
It reads read_committed, like eosflow, and stops when every partition has reached its end.

Runs as `python -m eosflow_dev.bench.handwritten --topic T --table bench.X --partitions P --records N`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime

import psycopg
from confluent_kafka import Consumer, KafkaError
from psycopg import sql

from eosflow_dev.bench.measure import emit_result
from eosflow_dev.bench.targets import COLUMNS, qualified
from eosflow_dev.stack import settings as settings_mod

BATCH = 1000  # records per poll, per INSERT batch, per commit: a common choice
IDLE_LIMIT_S = 60.0  # no record for this long before the end: something is wrong


class LoopStalled(RuntimeError):
    """The topic stopped delivering before every partition reached its end."""


def _row(msg, topic: str) -> tuple:
    body = json.loads(msg.value())
    _, ms = msg.timestamp()
    return (
        topic,
        msg.partition(),
        msg.offset(),
        datetime.fromtimestamp(ms / 1000, UTC),
        msg.key().decode() if msg.key() is not None else None,
        json.dumps([{"key": k, "value": v.decode()} for k, v in msg.headers() or []]),
        body["event_id"],
        body["event_type"],
        body["event_time"],
        body["order_id"],
        body["customer_id"],
        body["amount_cents"],
        body["currency"],
        body["schema_version"],
        "handwritten",
        "v1",
    )


def run(
    bootstrap: str, dsn: str, topic: str, table: str, partitions: int, group: str, batch: int = BATCH
) -> dict[str, float]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,  # how the loop knows it is done
        }
    )
    insert = sql.SQL("insert into {} ({}) values ({})").format(
        qualified(table),
        sql.SQL(", ").join(map(sql.Identifier, COLUMNS)),
        sql.SQL(", ").join(sql.Placeholder() * len(COLUMNS)),
    )
    written = batches = 0
    at_end: set[int] = set()
    started = last_record = time.monotonic()
    with psycopg.connect(dsn) as conn:
        consumer.subscribe([topic])
        try:
            while len(at_end) < partitions:
                rows = []
                for msg in consumer.consume(num_messages=batch, timeout=1.0):
                    err = msg.error()
                    if err is None:
                        rows.append(_row(msg, topic))
                        at_end.discard(msg.partition())
                    elif err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                    else:
                        raise RuntimeError(f"consumer error on {topic}: {err.str()}")
                if rows:
                    with conn.cursor() as cur:
                        cur.executemany(insert, rows)
                    conn.commit()
                    consumer.commit(asynchronous=False)
                    written += len(rows)
                    batches += 1
                    last_record = time.monotonic()
                elif time.monotonic() - last_record > IDLE_LIMIT_S:
                    raise LoopStalled(
                        f"no record from {topic} for {IDLE_LIMIT_S:.0f} s after {written:,}; "
                        f"partitions at their end: {sorted(at_end)} of {partitions}"
                    )
        finally:
            consumer.close()
    return {"loop_s": time.monotonic() - started, "rows": written, "batches": batches}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eosflow_dev.bench.handwritten")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--batch", type=int, default=BATCH)
    args = parser.parse_args(argv)
    s = settings_mod.load()
    emit_result(
        run(
            s.bootstrap_servers,
            s.warehouse_dsn,
            args.topic,
            args.table,
            args.partitions,
            args.group,
            args.batch,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
