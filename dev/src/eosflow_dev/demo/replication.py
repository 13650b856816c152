"""The demo's replication: a source table changed while the DAG runs, then its replica proved equal to it.

Kafka Connect (the stack's, started here as `eosflow stack up --with connect` starts it) runs Debezium's
PostgreSQL connector with exactly-once source support (KIP-618) on the table public.customers of the source
database. The pipeline `customers` (pipelines.yml) keeps its replica in replica.customers (one row per key)
and every change in replica.customers__changes. While the DAG eosflow_ingest_customers runs, a writer keeps
changing the source table in transactions of one to four statements: inserts, updates, deletes, a primary-key
update now and then, one transaction in eight rolled back. When the DAG is done the writer stops; its last
transaction inserts a row whose change marks the end, so once that change is in the topic (read_committed)
so is every change before it. One more run catches up, as the DAG's next scheduled run would, and the verdict
compares the two tables row for row, read from the source database and from the warehouse (never from
eosflow's ledger), then `eosflow verify` runs the state invariants S1-S3 with I1-I6.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import NamedTuple

import psycopg
from confluent_kafka import Consumer, TopicPartition
from psycopg import sql
from psycopg.types.json import Jsonb

from eosflow import pipelines
from eosflow.runners import job
from eosflow.verify import verify_pipeline
from eosflow_dev.stack import connect, optional
from eosflow_dev.stack.settings import StackSettings

PIPELINE = "customers"  # declared in pipelines.yml
CONNECTOR = "eosflow-demo"
TOPIC_PREFIX = "demo"  # Debezium's topic.prefix: the topic is demo.public.customers
TABLE = "customers"
IDS = f"{TABLE}_ids"  # a sequence: a key deleted is never made again, so the last create is unique
FIRST_ROWS = 1_000  # in the table before the connector's snapshot
MAX_TRANSACTIONS = 2_000  # the writer stops here even if the DAG is still running
PAUSE_S = 0.01  # between the writer's transactions
MARK_TIMEOUT_S = 120.0
COLUMNS = "id, email, tier, balance, profile, updated_at"
TIERS = ("free", "pro", "team", "enterprise")

Log = Callable[[str], None]


class Prepared(NamedTuple):
    source_conninfo: str
    rows_made: int  # by this demo, before the connector's snapshot (0: an earlier demo made the table)
    seconds: float


def prepare(settings: StackSettings) -> Prepared:
    """Kafka Connect started, the source table made, the connector registered and running: the part of
    the step that does not depend on what came before, so the demo runs it while the orders flow."""
    started = time.monotonic()
    details = optional.connect(settings, log=lambda message: None)
    made = _prepare_source(details.source_conninfo)
    connect.register_postgres_source(settings, CONNECTOR, [TABLE], TOPIC_PREFIX)
    connect.wait_running(settings, CONNECTOR, timeout=120)
    return Prepared(details.source_conninfo, made, time.monotonic() - started)


def run(
    settings: StackSettings, step: str, prepared: Prepared, run_dag: Callable[[str], str | None], log: Log
) -> bool:
    """Replicate public.customers while the DAG runs; True when the replica equals the source."""
    pipeline = pipelines.load(settings, PIPELINE)
    dag_id = f"eosflow_ingest_{PIPELINE}"
    log(
        f"{step} replicating the source database's {TABLE} table: Kafka Connect with Debezium's PostgreSQL "
        f"connector (exactly-once source, KIP-618) to {pipeline.topic}, into {pipeline.sink.state_table} "
        f"and its changelog {pipeline.target_table}, while a writer keeps changing the table"
    )
    made = f", {TABLE} made with {prepared.rows_made:,} rows for its snapshot" if prepared.rows_made else ""
    log(
        f"(made ready while the orders ran, in {prepared.seconds:.0f} s: the Connect worker started{made}, "
        f"the connector {CONNECTOR} registered and running)"
    )
    writer = SourceWriter(prepared.source_conninfo, random.Random())
    thread = threading.Thread(target=writer.run, name="demo-source-writer", daemon=True)
    thread.start()
    try:
        run_id = run_dag(dag_id)
    finally:
        writer.stop.set()
        thread.join()
    if run_id is None:
        return False
    mark = writer.mark()  # the last change: once it is in the topic, every change before it is
    log(
        f"the writer committed {writer.committed:,} source transactions while the DAG ran "
        f"({writer.rolled_back:,} more rolled back: Debezium never sees them); waiting for its last change "
        f"in {pipeline.topic}"
    )
    records = _wait_for_mark(settings, pipeline.topic, mark)
    log(f"{pipeline.topic} holds {records:,} change records, every committed change; one more run catches up")
    print("\n" + job.run(settings, PIPELINE, log=lambda message: None).table() + "\n")
    return _verdict(settings, prepared.source_conninfo, pipeline)


def _prepare_source(conninfo: str) -> int:
    """The source table, made with its first rows unless an earlier demo made it; the rows made."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if conn.execute("select to_regclass(%s) is not null", (f"public.{TABLE}",)).fetchone()[0]:
            return 0
        with conn.transaction():
            conn.execute(
                f"create table public.{TABLE} (id bigint primary key, email text not null, "
                "tier text not null, balance numeric(12,2), profile jsonb, updated_at timestamptz not null)"
            )
            conn.execute(f"create sequence public.{IDS} start {FIRST_ROWS + 1} owned by public.{TABLE}.id")
            rng, now = random.Random(FIRST_ROWS), datetime.now(UTC)
            with conn.cursor().copy(f"copy public.{TABLE} ({COLUMNS}) from stdin") as copy:
                for key in range(1, FIRST_ROWS + 1):
                    copy.write_row((key, *_values(rng), now))
    return FIRST_ROWS


def _values(rng: random.Random) -> tuple:
    """A customer's columns after its key and before updated_at."""
    profile = Jsonb({"signup": rng.choice(("web", "app", "store")), "score": rng.randint(0, 100)})
    return (f"c{rng.randrange(10**9)}@example.com", rng.choice(TIERS), _money(rng), profile)


def _money(rng: random.Random) -> Decimal:
    return Decimal(rng.randint(0, 10_000_000)) / 100


@dataclass
class SourceWriter:
    """Source transactions as an application makes them, until told to stop."""

    conninfo: str
    rng: random.Random
    stop: threading.Event = field(default_factory=threading.Event)
    committed: int = 0
    rolled_back: int = 0
    _conn: psycopg.Connection | None = None

    def run(self) -> None:
        self._conn = psycopg.connect(self.conninfo, autocommit=True)
        while not self.stop.is_set() and self.committed + self.rolled_back < MAX_TRANSACTIONS:
            self._transaction()
            time.sleep(PAUSE_S)

    def _transaction(self) -> None:
        assert self._conn is not None
        rollback = self.rng.random() < 1 / 8
        with self._conn.transaction():
            for _ in range(self.rng.randint(1, 4)):
                self._statement()
            if rollback:
                raise psycopg.Rollback()  # psycopg's own: the block rolls back, nothing propagates
        if rollback:
            self.rolled_back += 1
        else:
            self.committed += 1

    def _statement(self) -> None:
        assert self._conn is not None
        conn, rng = self._conn, self.rng
        kind = rng.choices(("insert", "update", "delete", "move"), weights=(25, 60, 12, 3))[0]
        if kind == "insert":
            self._insert()
            return
        found = conn.execute(f"select id from public.{TABLE} order by random() limit 1").fetchone()
        if found is None:
            return
        (key,) = found
        if kind == "update":
            conn.execute(
                f"update public.{TABLE} set tier = %s, balance = %s, profile = profile || %s, "
                "updated_at = now() where id = %s",
                (rng.choice(TIERS), _money(rng), Jsonb({"visits": rng.randint(1, 500)}), key),
            )
        elif kind == "delete":
            conn.execute(f"delete from public.{TABLE} where id = %s", (key,))
        else:  # the primary key moves: Debezium sends a delete of the old key and a create of the new
            conn.execute(
                f"update public.{TABLE} set id = nextval('public.{IDS}'), updated_at = now() where id = %s",
                (key,),
            )

    def _insert(self) -> int:
        assert self._conn is not None
        (key,) = self._conn.execute(
            f"insert into public.{TABLE} ({COLUMNS}) values (nextval('public.{IDS}'), %s, %s, %s, %s, now()) "
            "returning id",
            _values(self.rng),
        ).fetchone()
        return key

    def mark(self) -> int:
        """The writer's last transaction: one insert, whose key it returns."""
        assert self._conn is not None
        with self._conn.transaction():
            key = self._insert()
        self.committed += 1
        self._conn.close()
        return key


def _wait_for_mark(settings: StackSettings, topic: str, key: int) -> int:
    """Read the topic (read_committed, from its start) until the create of `key`; the records read.

    Debezium writes the table's changes to one partition in commit order, so every committed change
    before the mark is in the topic by then."""
    consumer = Consumer(
        {
            **settings.kafka,
            "group.id": f"eosflow-demo-{time.time_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline, records = time.monotonic() + MARK_TIMEOUT_S, 0
        while time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error():
                    continue
                records += 1
                if message.value() is not None and _created_key(message.value()) == key:
                    return records
        raise TimeoutError(
            f"the source's last change (the create of id {key}) was not in {topic} {MARK_TIMEOUT_S:.0f} s "
            f"after it committed: {connect.status(settings, CONNECTOR)}"
        )
    finally:
        consumer.close()


def _created_key(value: bytes) -> int | None:
    change = json.loads(value)
    change = change.get("payload", change)  # with or without the schema block
    after = change.get("after") or {}
    return after.get("id") if change.get("op") == "c" else None


def _verdict(settings: StackSettings, source_conninfo: str, pipeline: pipelines.Pipeline) -> bool:
    state_table = pipeline.sink.state_table

    def rows(conn: psycopg.Connection, table: str) -> dict[int, tuple]:
        select = sql.SQL("select {} from {} order by id").format(
            sql.SQL(COLUMNS), sql.Identifier(*table.split("."))
        )
        return {r[0]: r[1:] for r in conn.execute(select)}

    with psycopg.connect(source_conninfo) as conn:
        source = rows(conn, f"public.{TABLE}")
    with psycopg.connect(settings.warehouse_dsn) as conn:
        replica = rows(conn, state_table)
        (changes,) = conn.execute(
            sql.SQL("select count(*) from {}").format(sql.Identifier(*pipeline.target_table.split(".")))
        ).fetchone()
    missing = [k for k in source if k not in replica]
    extra = [k for k in replica if k not in source]
    differ = [k for k in source if k in replica and source[k] != replica[k]]
    rows = [
        ("rows in the source table", len(source)),
        (f"rows in {state_table}", len(replica)),
        ("source rows missing from the replica", len(missing)),
        ("replica rows the source does not have", len(extra)),
        ("rows that differ in a column", len(differ)),
        (f"changes in {pipeline.target_table}", changes),
    ]
    width = max(len(name) for name, _ in rows)
    print("\n".join(f"  {name:<{width}}  {n:>9,}" for name, n in rows))
    checked = verify_pipeline(settings, PIPELINE)  # dbt: S1-S3 (state against changelog) and I1-I6
    print("\n" + "\n".join("  " + line for line in checked.table().splitlines()))
    equal = not (missing or extra or differ)
    if not equal:
        print(f"\n  first keys: missing {missing[:5]}, extra {extra[:5]}, differing {differ[:5]}")
    ok = equal and checked.ok
    verdict = "REPLICA EQUALS THE SOURCE: every row, every column" if ok else "REPLICA MISMATCH"
    print(f"\n  verdict: {verdict}\n")
    return ok
