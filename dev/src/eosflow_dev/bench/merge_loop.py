"""The merge loop a competent engineer writes to replicate a Debezium topic into Postgres, in one process.

Written apart from eosflow's code (none of eosflow.schema, .sinks or .ledger): `assign` (no consumer group)
from positions stored in Postgres, read_committed; each envelope decoded into msgspec structs in C; per
batch ONE transaction: COPY the batch's changes into a temporary table, reduce them to the last change
per key by LSN in SQL, DELETE the keys whose last change is a delete, INSERT ... ON CONFLICT DO UPDATE the
others (guarded: a row's stored LSN is never overwritten by an older one), and upsert the positions. A
crash anywhere re-reads from the stored positions; the guard makes a re-read batch change nothing.

What it does not do, as such loops usually do not: keep a history, or remember a deleted key's LSN (an
older create re-delivered after the delete would bring the row back; read_committed from positions
stored with the rows never re-delivers within this loop), or reject bad changes (one stops the loop).

Runs as `python -m eosflow_dev.bench.merge_loop --topic T --table bench.X --partitions P`.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import msgspec
import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from psycopg import sql

from eosflow_dev.bench.measure import emit_result
from eosflow_dev.stack import settings as settings_mod

# Records per Postgres transaction: 20k, 50k and 100k took 18.8, 18.8 and 16.5 s over the same 1M changes
# (one try each, a busy machine): about the same; 50k keeps each transaction's reduce small.
BATCH = 50_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COPY = "copy _changes (id, op, lsn, email, balance, updated_at, profile) from stdin"
IDLE_LIMIT_S = 60.0  # no record for this long before the end: something is wrong


class LoopStalled(RuntimeError):
    """The topic stopped giving records before every partition reached its end."""


def qualified(table: str) -> sql.Identifier:
    schema, _, name = table.rpartition(".")
    return sql.Identifier(schema or "bench", name)


class Customer(msgspec.Struct):
    """public.customers as Debezium's JsonConverter writes a row (decimal.handling.mode=string,
    time.precision.mode=adaptive_time_microseconds, jsonb as its text)."""

    id: int
    email: str | None = None
    balance: Decimal | None = None
    updated_at: int | None = None
    profile: str | None = None


class Source(msgspec.Struct):
    lsn: int
    ts_ms: int


class Change(msgspec.Struct):
    """Debezium's envelope, without the schema block; the fields not named here are skipped in C."""

    op: str
    source: Source
    before: Customer | None = None
    after: Customer | None = None


def prepare(conn: psycopg.Connection, table: str) -> None:
    """The replica (its LSN beside the row), its positions table, and the session's temporary table."""
    conn.execute(
        sql.SQL(
            "create table if not exists {} (id bigint primary key, email text not null, "
            "balance numeric(12,2), updated_at timestamptz, profile jsonb, lsn bigint not null)"
        ).format(qualified(table))
    )
    conn.execute(
        sql.SQL(
            "create table if not exists {} (topic text, partition int, next_offset bigint not null, "
            "primary key (topic, partition))"
        ).format(qualified(f"{table}_positions"))
    )
    conn.execute(
        'create temporary table if not exists _changes (id bigint not null, op "char" not null, '
        "lsn bigint not null, email text, balance numeric(12,2), updated_at timestamptz, profile jsonb)"
    )


def statements(table: str) -> list[sql.Composed]:
    """Reduce, delete, upsert, in the batch's transaction (after the COPY); then empty the batch table."""
    target = qualified(table)
    return [
        sql.SQL(
            "create temporary table _last on commit drop as select distinct on (id) * from _changes "
            "order by id, lsn desc"
        ),
        sql.SQL("delete from {t} t using _last l where l.op = 'd' and t.id = l.id and t.lsn < l.lsn").format(
            t=target
        ),
        sql.SQL(
            "insert into {t} as t (id, email, balance, updated_at, profile, lsn) "
            "select id, email, balance, updated_at, profile, lsn from _last where op <> 'd' "
            "on conflict (id) do update set email = excluded.email, balance = excluded.balance, "
            "updated_at = excluded.updated_at, profile = excluded.profile, lsn = excluded.lsn "
            "where t.lsn < excluded.lsn"
        ).format(t=target),
        sql.SQL("truncate _changes"),
    ]


def run(bootstrap: str, dsn: str, topic: str, table: str, partitions: int, batch: int = BATCH) -> dict:
    decode = msgspec.json.Decoder(Change).decode
    upsert = sql.SQL(
        "insert into {} (topic, partition, next_offset) values (%s, %s, %s) "
        "on conflict (topic, partition) do update set next_offset = excluded.next_offset"
    ).format(qualified(f"{table}_positions"))
    merge = statements(table)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused-with-assign",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    read = changes = batches = 0
    copy_s = merge_s = 0.0
    started = last_record = time.monotonic()
    with psycopg.connect(dsn) as conn:
        prepare(conn, table)
        conn.commit()
        stored = dict(
            ((t, p), o)
            for t, p, o in conn.execute(
                sql.SQL("select topic, partition, next_offset from {}").format(
                    qualified(f"{table}_positions")
                )
            )
        )
        conn.commit()
        consumer.assign(
            [TopicPartition(topic, p, stored.get((topic, p), OFFSET_BEGINNING)) for p in range(partitions)]
        )
        at_end: set[int] = set()
        try:
            while len(at_end) < partitions:
                rows, ends = [], {}
                for msg in consumer.consume(num_messages=batch, timeout=1.0):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            at_end.add(msg.partition())
                            continue
                        raise RuntimeError(f"consumer error on {topic}: {err.str()}")
                    at_end.discard(msg.partition())
                    ends[msg.partition()] = msg.offset() + 1
                    read += 1
                    value = msg.value()
                    if value is None:  # a tombstone: for log compaction, nothing to apply
                        continue
                    c = decode(value)
                    if c.op == "d":
                        rows.append((c.before.id, "d", c.source.lsn, None, None, None, None))
                        continue
                    a = c.after
                    at = None if a.updated_at is None else _EPOCH + timedelta(microseconds=a.updated_at)
                    rows.append((a.id, "u", c.source.lsn, a.email, a.balance, at, a.profile))
                if not ends:
                    if time.monotonic() - last_record > IDLE_LIMIT_S:
                        raise LoopStalled(f"no record from {topic} for {IDLE_LIMIT_S:.0f} s after {read:,}")
                    continue
                t0 = time.monotonic()
                with conn.transaction(), conn.cursor() as cur:
                    with cur.copy(_COPY) as copy:
                        for row in rows:
                            copy.write_row(row)
                    t1 = time.monotonic()
                    for statement in merge:
                        cur.execute(statement)
                    cur.executemany(upsert, [(topic, p, o) for p, o in sorted(ends.items())])
                copy_s += t1 - t0
                merge_s += time.monotonic() - t1
                changes += len(rows)
                batches += 1
                last_record = time.monotonic()
        finally:
            consumer.close()
    return {
        "loop_s": time.monotonic() - started,
        "rows": read,
        "changes": changes,
        "batches": batches,
        "copy_s": copy_s,
        "merge_s": merge_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eosflow_dev.bench.merge_loop")
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
