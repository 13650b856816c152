"""A Postgres table replicated by real Debezium (3.6.1, in the stack's Kafka Connect with exactly-once source
support) through eosflow into a state table: after inserts in a multi-row transaction, a transaction rolled
back, updates that leave a TOASTed column unchanged, a delete, a primary-key update, numeric, timestamptz,
arrays and jsonb, the replica equals the source table row for row, read from the source database."""

from __future__ import annotations

import secrets
import time
import uuid
from decimal import Decimal

import psycopg
import pytest

from eosflow.verify import verify_pipeline
from eosflow_dev.stack import connect

pytestmark = pytest.mark.integration

COLUMNS = [
    {"name": "id", "type": "bigint", "required": True},
    {"name": "email", "type": "text", "required": True},
    {"name": "balance", "type": "numeric(12,2)"},
    {"name": "seen", "type": "timestamptz"},
    {"name": "tags", "type": "text[]"},
    {"name": "profile", "type": "jsonb"},
    {"name": "notes", "type": "text"},
]
SELECT = "select id, email, balance, seen, tags, profile, notes from {} order by id"


@pytest.fixture
def source_table(connect_server):
    """A table of its own in the source database, dropped afterwards."""
    table = f"customers_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(connect_server.source_conninfo, autocommit=True) as conn:
        conn.execute(
            f"create table {table} (id bigint primary key, email text not null, balance numeric(12,2), "
            "seen timestamptz, tags text[], profile jsonb, notes text)"
        )
    yield table
    with psycopg.connect(connect_server.source_conninfo, autocommit=True) as conn:
        conn.execute(f"drop table if exists {table}")


def _source_rows(details, table: str) -> dict[int, tuple]:
    with psycopg.connect(details.source_conninfo) as conn:
        return {r[0]: r[1:] for r in conn.execute(SELECT.format(table)).fetchall()}


def _replica_rows(case, state: str) -> dict[int, tuple]:
    return {r[0]: r[1:] for r in case.query(SELECT.format(state))}


def _ingest_until_equal(case, details, table: str, state: str, timeout: float = 90.0) -> None:
    """Debezium streams asynchronously: run eosflow until the replica equals the source (or time out)."""
    from eosflow.sources.kafka.offsets import TopicMissingError

    deadline = time.monotonic() + timeout
    while True:
        try:
            assert case.ingest().outcome == "committed"
        except TopicMissingError:  # Debezium makes the topic with its first change
            assert time.monotonic() < deadline, "Debezium never made the table's topic"
            time.sleep(1.0)
            continue
        source, replica = _source_rows(details, table), _replica_rows(case, state)
        if source == replica:
            return
        rejected = case.query("select left(error, 200) from eosflow.rejected where pipeline = %s", case.name)
        assert time.monotonic() < deadline, (
            f"the replica never equalled the source: source keys {sorted(source)}, replica keys "
            f"{sorted(replica)}, differing {[k for k in source if source[k] != replica.get(k)]}, "
            f"rejected {rejected[:3]}"
        )
        time.sleep(1.0)


def test_a_table_debezium_streams_is_replicated_exactly(case, connect_server, source_table, settings):
    prefix = f"cdc{uuid.uuid4().hex[:8]}"
    name = f"eosflow-test-{prefix}"
    state = f"replica.{case.name}"
    case.spec.pop("business_key", None)
    case.write_config(
        topics=[f"{prefix}.public.{source_table}"],
        columns=COLUMNS,
        changes="debezium",
        primary_key=["id"],
        state_table=state,
        max_value_bytes=1_000_000,  # Debezium's schema block and a TOASTed column: well past 4 kB
    )
    big = secrets.token_hex(6000)  # 12 kB that do not compress: stored out of line (TOAST)
    conninfo = connect_server.source_conninfo
    # a multi-row source transaction, before the connector's snapshot
    with psycopg.connect(conninfo, autocommit=True) as conn, conn.transaction():
        for i in range(1, 6):
            conn.execute(
                f"insert into {source_table} values (%s, %s, %s, now(), %s, %s, %s)",
                (
                    i,
                    f"{i}@x",
                    Decimal(f"{i}.25"),
                    [f"t{i}", "b"],
                    psycopg.types.json.Jsonb({"n": i}),
                    big,
                ),
            )
    connect.register_postgres_source(settings, name, [source_table], prefix)
    try:
        connect.wait_running(settings, name)
        _ingest_until_equal(case, connect_server, source_table, state)  # the snapshot: op r
        with psycopg.connect(connect_server.source_conninfo, autocommit=True) as conn:
            with conn.transaction():
                conn.execute(f"update {source_table} set email = 'changed@x', balance = 99.99 where id = 1")
                deep = '{"deep": [1, 2.5]}'
                conn.execute(f"update {source_table} set tags = '{{}}', profile = %s where id = 2", (deep,))
                conn.execute(f"delete from {source_table} where id = 3")
                conn.execute(f"update {source_table} set id = 40 where id = 4")  # the key moves
                conn.execute(f"insert into {source_table} (id, email) values (6, 'six@x')")
            try:
                with conn.transaction():
                    conn.execute(f"insert into {source_table} (id, email) values (7, 'never@x')")
                    raise RuntimeError("roll back")
            except RuntimeError:
                pass
        _ingest_until_equal(case, connect_server, source_table, state)
        notes = case.query(f"select count(*) from {case.table} where 'notes' = any(change_unchanged)")
        assert notes[0][0] >= 2  # the updates left the TOASTed notes out, and the replica kept them
        # The primary-key update's two halves carry its one LSN (the Iceberg state sink finds a moved
        # key's values by it: eosflow.sinks.iceberg.state._halves).
        halves = case.query(
            f"select change_op, change_lsn from {case.table} where (change_op = 'd' and id = 4) "
            "or (change_op = 'c' and id = 40) order by change_op"
        )
        assert [op for op, _ in halves] == ["c", "d"] and halves[0][1] == halves[1][1], halves
        result = verify_pipeline(case.settings, case.name)
        assert result.ok, result.table()
    finally:
        connect.delete(settings, name)
