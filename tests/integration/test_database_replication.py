"""A whole database in one declaration, against real Debezium: `database:` names a connector's table topics,
discovery reads each table's columns from Debezium's schema block, and each table is replicated as a member
pipeline of its own; a table whose topic appears later and a column added in the source are taken by the
next run. The replicas are compared with the source tables, read from the source database."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from decimal import Decimal

import psycopg
import pytest
import yaml

from eosflow import pipelines
from eosflow.verify import verify_pipeline
from eosflow_dev.stack import connect

pytestmark = pytest.mark.integration


@pytest.fixture
def source_schema(connect_server):
    """A schema of its own in the source database, with two tables; dropped afterwards."""
    schema = f"s{uuid.uuid4().hex[:8]}"
    with psycopg.connect(connect_server.source_conninfo, autocommit=True) as conn:
        conn.execute(f"create schema {schema}")
        conn.execute(
            f'create table {schema}.customers (id bigint primary key, "Email" text not null, '
            "balance numeric(12,2), seen timestamptz)"
        )
        conn.execute(
            f"create table {schema}.orders (id bigint primary key, customer bigint, total numeric(10,2))"
        )
    yield schema
    with psycopg.connect(connect_server.source_conninfo, autocommit=True) as conn:
        conn.execute(f"drop schema {schema} cascade")


def _eosflow(*args: str, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eosflow.cli", *args], env=env, capture_output=True, text=True, timeout=600
    )


def _rows(conninfo: str, sql: str) -> dict:
    with psycopg.connect(conninfo) as conn:
        return {r[0]: r[1:] for r in conn.execute(sql).fetchall()}


def _replicate_until_equal(env, settings, conninfo, entry: str, pairs: dict[str, str], timeout=120.0):
    """Run the entry until each source query's rows equal its replica query's (Debezium streams
    asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        run = _eosflow("ingest", "--pipeline", entry, env=env)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        differ = {}
        for source, replica in pairs.items():
            want = _rows(conninfo, source)
            try:
                got = _rows(settings.warehouse_dsn, replica)
            except psycopg.errors.UndefinedTable:
                got = None
            if want != got:
                differ[source] = (want, got)
        if not differ:
            return run
        assert time.monotonic() < deadline, f"never equal: {differ}\n{run.stdout[-2000:]}"
        time.sleep(1.0)


def _assert_each_member_reported_its_runs(lineage, members: dict[str, tuple[str, list[str]]]) -> None:
    """OpenLineage: every run of a member is START then COMPLETE of `<member>.ingest`, its table topic in
    and its outputs (the changelog, then the state table) out, each event valid by the spec's schemas; the
    entry itself is no run. members: member -> (its topic, its outputs as OpenLineage names them)."""
    from tests.unit.observe.test_openlineage import _validate

    events = [json.loads(line) for line in lineage.read_text().splitlines() if line.strip()]
    by_run: dict[str, list[dict]] = {}
    for event in events:
        _validate(event)
        by_run.setdefault(event["run"]["runId"], []).append(event)
    assert {e["job"]["name"] for e in events} == {f"{m}.ingest" for m in members}
    for run in by_run.values():
        assert [e["eventType"] for e in run] == ["START", "COMPLETE"], run
        topic, outputs = members[run[0]["job"]["name"].removesuffix(".ingest")]
        for event in run:
            assert [d["name"] for d in event["inputs"]] == [topic]
            assert [d["name"] for d in event["outputs"]] == outputs
        assert run[1]["run"]["facets"]["eosflow_run"]["outcome"] == "committed"


def test_a_database_entry_replicates_each_table_and_takes_a_later_table_an_added_column_and_a_wider_type(
    connect_server, source_schema, settings, tmp_path, monkeypatch
):
    """Real Debezium and one eosflow run per round (a Spark job each): about a minute."""
    prefix = f"db{uuid.uuid4().hex[:8]}"
    entry = f"e{uuid.uuid4().hex[:8]}"
    target = f"r{uuid.uuid4().hex[:8]}"
    config = tmp_path / "pipelines.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "pipelines": {
                    entry: {
                        "database": {"topic_prefix": prefix, "schemas": [source_schema]},
                        "changes": "debezium",
                        "target_schema": target,
                        "max_value_bytes": 1_000_000,
                    }
                }
            }
        )
    )
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(config))
    lineage = tmp_path / "lineage.jsonl"  # each member's run, reported with the client's file transport
    env = dict(
        __import__("os").environ,
        OPENLINEAGE__TRANSPORT__TYPE="file",
        OPENLINEAGE__TRANSPORT__LOG_FILE_PATH=str(lineage),
        OPENLINEAGE__TRANSPORT__APPEND="true",
    )
    conninfo = connect_server.source_conninfo
    with psycopg.connect(conninfo, autocommit=True) as conn, conn.transaction():
        for i in range(1, 4):
            conn.execute(
                f"insert into {source_schema}.customers values (%s, %s, %s, now())",
                (i, f"{i}@x", Decimal(f"{i}.5")),
            )
    name = f"eosflow-test-{prefix}"
    connect.register_postgres_source(
        settings, name, [f"{source_schema}.customers", f"{source_schema}.orders"], prefix
    )
    customers = f"{entry}__{source_schema}__customers"
    orders = f"{entry}__{source_schema}__orders"
    try:
        connect.wait_running(settings, name)
        pairs = {
            f'select id, "Email", balance, seen from {source_schema}.customers order by 1': (
                f"select id, email, balance, seen from {target}.{source_schema}__customers order by 1"
            )
        }
        first = _replicate_until_equal(env, settings, conninfo, entry, pairs)
        assert customers in first.stdout and orders not in first.stdout  # orders has no topic yet

        found = _eosflow("discover", "--pipeline", entry, env=env)
        assert found.returncode == 0, found.stderr
        assert f"member {customers}: unchanged" in found.stdout
        declared = pipelines.load(settings, customers)
        assert {c.name: c.type.declared for c in declared.schema.columns if c.meta != "change"} == {
            "id": "bigint",
            "email": "text",  # the source's "Email"
            "balance": "numeric(12,2)",
            "seen": "timestamptz",
        }
        assert declared.schema.primary_key == ("id",)

        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"insert into {source_schema}.orders values (10, 1, 20.00), (11, 2, 5.50)")
            conn.execute(f"alter table {source_schema}.customers add column vip boolean")
            # A widening in the source: the member's tables follow it (a value only the wider type holds).
            conn.execute(f"alter table {source_schema}.customers alter column balance type numeric(14,2)")
            conn.execute(
                f"update {source_schema}.customers set vip = true, balance = 123456789012.25 where id = 2"
            )
            conn.execute(f"delete from {source_schema}.customers where id = 3")
        pairs[f"select id, customer, total from {source_schema}.orders order by 1"] = (
            f"select id, customer, total from {target}.{source_schema}__orders order by 1"
        )
        pairs = {
            k.replace(", seen from", ", seen, vip from"): v.replace(", seen from", ", seen, vip from")
            for k, v in pairs.items()
        }
        later = _replicate_until_equal(env, settings, conninfo, entry, pairs)
        assert orders in later.stdout
        vip = _rows(
            settings.warehouse_dsn, f"select id, vip from {target}.{source_schema}__customers order by 1"
        )
        assert vip == {1: (None,), 2: (True,)}
        assert {c.name: c.type.declared for c in pipelines.load(settings, customers).schema.columns}[
            "balance"
        ] == "numeric(14,2)"
        with psycopg.connect(settings.warehouse_dsn) as conn:
            for table in (f"{source_schema}__customers", f"{source_schema}__customers__changes"):
                (kind,) = conn.execute(
                    "select format_type(atttypid, atttypmod) from pg_attribute "
                    "where attrelid = %s::regclass and attname = 'balance'",
                    (f"{target}.{table}",),
                ).fetchone()
                assert kind == "numeric(14,2)", table
        for member in (customers, orders):
            verdict = verify_pipeline(settings, member)
            assert verdict.ok, verdict.table()
        _assert_each_member_reported_its_runs(
            lineage,
            {
                # the outputs as the sink names them: a change stream's changelog, then its replica
                m: (
                    f"{prefix}.{source_schema}.{t}",
                    [
                        f"warehouse.{target}.{source_schema}__{t}__changes",
                        f"warehouse.{target}.{source_schema}__{t}",
                    ],
                )
                for m, t in ((customers, "customers"), (orders, "orders"))
            },
        )
    finally:
        connect.delete(settings, name)
