"""Kafka Connect with Debezium for real: a worker of a private state folder and free ports on the stack's
broker (its group and topics named for this module, deleted afterwards), streaming a private Postgres
that decodes logically (never the dev stack's), read back with isolation.level=read_committed."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from eosflow.errors import StackError
from eosflow_dev.stack import connect, optional
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.connect import ConnectService
from eosflow_dev.stack.kafka import quiet_logger
from eosflow_dev.stack.postgres import PostgresService
from eosflow_dev.stack.process import pid_alive, port_is_free

pytestmark = pytest.mark.integration

RUN = uuid.uuid4().hex[:8]  # in every topic, group and connector name of this module


def quiet(msg: str) -> None:
    pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _private_settings(state_dir: Path) -> settings_mod.StackSettings:
    return dataclasses.replace(
        settings_mod.load(),
        state_dir=state_dir,
        pg_port=_free_port(),
        connect_port=_free_port(),
        connect_group=f"eosflow-connect-test-{RUN}",
    )


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    """A private Postgres (wal_level = logical, from the stack's own settings file) and the settings of a
    worker of its own; afterwards both stopped, the cluster removed, and the topics made here deleted."""
    settings = _private_settings(tmp_path_factory.mktemp("connect") / "state")
    pg = PostgresService(settings)
    pg.start(log=quiet)
    yield settings
    ConnectService(settings).stop(log=quiet)
    pg.stop(log=quiet)
    pg.reset()
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "logger": quiet_logger()})
    mine = [t for t in admin.list_topics(timeout=10).topics if RUN in t]
    if mine:
        for done in admin.delete_topics(mine).values():
            done.result()


@pytest.fixture
def worker(private):
    """The private worker, started (its source database made), stopped after the test."""
    details = optional.connect(private, log=quiet)
    yield details
    ConnectService(private).stop(log=quiet)


def _source(private) -> psycopg.Connection:
    return psycopg.connect(connect.source_conninfo(private), autocommit=True)


def _admin(private, dbname: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(connect._admin_conninfo(private, dbname), autocommit=True)


def _consume(
    private, topic: str, done: Callable[[list], bool], timeout: float = 90.0, raw: bool = False
) -> list:
    """(key, value) of each record of `topic`, JSON-decoded (a tombstone's value None; `raw`: as bytes),
    read committed, until done(records) or the timeout."""
    consumer = Consumer(
        {
            "bootstrap.servers": private.bootstrap_servers,
            "group.id": f"test-{RUN}-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "logger": quiet_logger(),
        }
    )
    consumer.subscribe([topic])
    records: list = []
    deadline = time.monotonic() + timeout
    try:
        while not done(records) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            if raw:
                records.append((message.key(), message.value()))
            else:
                decode = lambda data: None if data is None else json.loads(data)  # noqa: E731
                records.append((decode(message.key()), decode(message.value())))
    finally:
        consumer.close()
    return records


def _processes_naming(folder: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(folder) in cmdline and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _eosflow(private, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        EOSFLOW_STATE_DIR=str(private.state_dir),
        EOSFLOW_PG_PORT=str(private.pg_port),
        EOSFLOW_CONNECT_PORT=str(private.connect_port),
        EOSFLOW_CONNECT_GROUP=private.connect_group,
    )
    return subprocess.run(
        [sys.executable, "-m", "eosflow.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_worker_lists_debezium_answers_status_and_stop_leaves_no_process(private):
    svc = ConnectService(private)
    started = time.monotonic()
    details = optional.connect(private, log=quiet)
    print(f"connect start: {time.monotonic() - started:.1f} s")  # measured for the docs (-s shows it)
    assert details.endpoint == f"http://127.0.0.1:{private.connect_port}"

    pom = ET.parse(private.root / "infra" / "maven" / "kafka" / "pom.xml").getroot()
    broker_version = pom.find("{*}properties/{*}kafka.version").text
    with urllib.request.urlopen(f"{details.endpoint}/", timeout=5) as answer:
        assert json.load(answer)["version"] == broker_version
    with urllib.request.urlopen(f"{details.endpoint}/connector-plugins", timeout=5) as answer:
        plugins = {p["class"]: p["version"] for p in json.load(answer)}
    assert plugins[connect.POSTGRES_CONNECTOR] == "3.6.1.Final"

    status = _eosflow(private, "stack", "status")
    rows = {line.split()[0]: line for line in status.stdout.splitlines()}
    assert "healthy" in rows["connect"] and f"group {private.connect_group}" in rows["connect"]
    logs = _eosflow(private, "stack", "logs", "connect", "-n", "2000")
    assert "Kafka Connect started" in logs.stdout

    time.sleep(5)
    pid = svc.pid()
    print(f"connect idle RSS: {_rss_mb(pid):.0f} MB")
    svc.stop(log=quiet)
    assert svc.pid() is None and not pid_alive(pid)
    assert _processes_naming(svc.home) == []
    assert port_is_free("127.0.0.1", private.connect_port)


def test_a_source_transaction_reaches_the_topic_as_debezium_envelopes(private, worker):
    name, prefix = f"envelopes-{RUN}", f"cdc{RUN}"
    with _source(private) as db:
        db.execute("create table orders (id int primary key, amount numeric(12,2), qty numeric, note text)")
        db.execute("insert into orders values (1, 12.30, 1234567890.123456789, 'snapshot')")
    connect.register_postgres_source(private, name, ["orders"], prefix)
    state = connect.wait_running(private, name)
    assert state["connector"]["state"] == "RUNNING" and [t["state"] for t in state["tasks"]] == ["RUNNING"]

    with _source(private) as db, db.transaction():  # one source transaction, several rows
        db.execute("insert into orders values (2, 0.05, 0.000001, 'new'), (3, 7, null, 'gone soon')")
        db.execute("update orders set note = 'changed', amount = 99999999.99 where id = 2")
        db.execute("delete from orders where id = 3")

    topic = f"{prefix}.public.orders"
    records = _consume(private, topic, lambda got: len(got) >= 6)
    seen = [(key["payload"]["id"], value and value["payload"]["op"]) for key, value in records]
    assert seen == [(1, "r"), (2, "c"), (3, "c"), (2, "u"), (3, "d"), (3, None)]  # None: the tombstone

    values = [value for _, value in records if value is not None]
    assert {v["schema"]["name"] for v in values} == {f"{topic}.Envelope"}  # schemas.enable: schema + payload
    payloads = [v["payload"] for v in values]
    assert {(p["source"]["db"], p["source"]["schema"], p["source"]["table"]) for p in payloads} == {
        ("source", "public", "orders")
    }
    # numeric as exact text, whatever its scale
    assert payloads[0]["after"] == {
        "id": 1,
        "amount": "12.30",
        "qty": "1234567890.123456789",
        "note": "snapshot",
    }
    assert payloads[1]["after"]["qty"] == "0.000001"
    assert payloads[3]["after"] == {"id": 2, "amount": "99999999.99", "qty": "0.000001", "note": "changed"}
    assert payloads[4]["after"] is None and payloads[4]["before"]["id"] == 3
    assert len({p["source"]["txId"] for p in payloads[1:]}) == 1  # the one source transaction

    slot = connect.slot_name(name)
    with _admin(private, private.source_database) as admin:
        assert admin.execute(
            "select plugin from pg_replication_slots where slot_name = %s", (slot,)
        ).fetchone() == ("pgoutput",)
    connect.delete(private, name)
    with pytest.raises(StackError, match="HTTP 404"):
        connect.status(private, name)
    with _admin(private, private.source_database) as admin:
        assert (
            admin.execute("select 1 from pg_replication_slots where slot_name = %s", (slot,)).fetchone()
            is None
        )
        assert admin.execute("select 1 from pg_publication where pubname = %s", (slot,)).fetchone() is None
    connect.delete(private, name)  # again: nothing left to do, no error


def test_a_sigkilled_worker_restarted_goes_on_and_each_change_is_read_once(private, worker):
    """Rows go in one per source transaction while the worker is killed mid-stream and started again:
    a read-committed consumer sees every row once (the killed task's open transaction is aborted, and
    the new one resumes from the offsets committed with the records)."""
    name, prefix = f"killed-{RUN}", f"kill{RUN}"
    svc = ConnectService(private)
    with _source(private) as db:
        db.execute("create table ticks (id int primary key)")
    connect.register_postgres_source(private, name, ["ticks"], prefix)
    connect.wait_running(private, name)

    stop, written = threading.Event(), [0]

    def write() -> None:
        with _source(private) as db:
            while not stop.is_set():
                db.execute("insert into ticks values (%s)", (written[0] + 1,))
                written[0] += 1
                time.sleep(0.003)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(2)
        killed_at = written[0]
        os.killpg(svc.pid(), signal.SIGKILL)
        time.sleep(1)
        assert svc.pid() is None
        optional.connect(private, log=quiet)
        connect.wait_running(private, name, timeout=120)
        time.sleep(2)
    finally:
        stop.set()
        writer.join()
    assert 0 < killed_at < written[0]

    records = _consume(private, f"{prefix}.public.ticks", lambda got: len(got) >= written[0])
    ids = [value["payload"]["after"]["id"] for _, value in records]
    assert sorted(ids) == list(range(1, written[0] + 1))  # each once, none lost
    assert {value["payload"]["op"] for _, value in records} == {"c"}


def test_a_connector_without_schemas_or_required_exactly_once_runs_as_asked(private, worker):
    name, prefix = f"plain-{RUN}", f"plain{RUN}"
    with _source(private) as db:
        db.execute("create table plain (id int primary key, amount numeric(6,3))")
        db.execute("insert into plain values (1, 1.5)")
    connect.register_postgres_source(private, name, ["plain"], prefix, exactly_once=False, schemas=False)
    connect.wait_running(private, name)
    with urllib.request.urlopen(f"{worker.endpoint}/connectors/{name}/config", timeout=5) as answer:
        config = json.load(answer)
    assert "exactly.once.support" not in config and config["value.converter.schemas.enable"] == "false"
    [(key, value)] = _consume(private, f"{prefix}.public.plain", lambda got: len(got) >= 1)
    assert key == {"id": 1}  # the payload alone, no schema beside it
    assert value["op"] == "r" and value["after"] == {"id": 1, "amount": "1.500"}
    connect.delete(private, name)


def test_a_connector_for_a_table_that_is_not_there_fails_with_debeziums_reason(private, worker):
    name = f"typo-{RUN}"
    connect.register_postgres_source(private, name, ["no_such_table"], f"typo{RUN}")
    with pytest.raises(StackError, match="No table filters found for filtered publication") as failed:
        connect.wait_running(private, name)
    assert "\tat " not in str(failed.value) and len(str(failed.value).splitlines()) < 5  # no Java frames
    connect.delete(private, name)


def test_the_initial_snapshot_of_ten_thousand_rows(private, worker):
    name, prefix, rows = f"snapshot-{RUN}", f"snap{RUN}", 10_000
    with _source(private) as db:
        db.execute("create table big (id int primary key, price numeric(10,2))")
        db.execute("insert into big select i, i / 100.0 from generate_series(1, %s) i", (rows,))
    started = time.monotonic()
    connect.register_postgres_source(private, name, ["public.big"], prefix)
    records = _consume(private, f"{prefix}.public.big", lambda got: len(got) >= rows, timeout=180)
    print(f"snapshot of {rows} rows: {time.monotonic() - started:.1f} s")
    after = {value["payload"]["after"]["id"]: value["payload"]["after"]["price"] for _, value in records}
    assert len(records) == rows and len(after) == rows
    assert after[1] == "0.01" and after[rows] == "100.00" and after[12_34] == "12.34"
    assert {value["payload"]["op"] for _, value in records} == {"r"}


def test_the_source_password_is_in_no_log_config_or_command_line(private, worker):
    name, prefix = f"secret-{RUN}", f"sec{RUN}"
    svc = ConnectService(private)
    password = connect.source_password(private)
    with _source(private) as db:
        db.execute("create table notes (id int primary key)")
        db.execute("insert into notes values (1)")
    connect.register_postgres_source(private, name, ["notes"], prefix)
    connect.wait_running(private, name)
    assert len(_consume(private, f"{prefix}.public.notes", lambda got: len(got) >= 1)) == 1  # it logged in

    answers = []
    for path in ("/config", "", "/tasks", "/status"):
        with urllib.request.urlopen(f"{worker.endpoint}/connectors/{name}{path}", timeout=5) as answer:
            answers.append(answer.read().decode())
    config = json.loads(answers[0])
    assert config["database.password"] == f"${{file:{svc.password_file}:password}}"
    # What Connect keeps in its config topic: the reference, not the password (tasks' configs too).
    task_key = f"task-{name}-0".encode()
    stored = _consume(
        private, f"{private.connect_group}-configs", lambda got: task_key in dict(got), timeout=30, raw=True
    )
    assert b"${file:" in dict(stored)[task_key]  # the task's config, made by Debezium from a resolved one
    stored_text = repr(stored)
    cmdlines = [
        Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        for pid in _processes_naming(svc.home)
    ]
    assert cmdlines
    logs = _eosflow(private, "stack", "logs", "-n", "5000")
    printed = [*answers, stored_text, *cmdlines, logs.stdout, logs.stderr, repr(worker)]
    printed += [p.read_text(errors="replace") for p in private.state_dir.rglob("*.log")]
    printed += [PostgresService(private).log_path.read_text(errors="replace")]
    assert [text for text in printed if password in text] == []
    assert svc.password_file.stat().st_mode & 0o777 == 0o600
    connect.delete(private, name)


def test_a_postgres_without_logical_decoding_is_refused_saying_how_to_restart_it(tmp_path):
    settings = _private_settings(tmp_path / "state")
    pg = PostgresService(settings)
    try:
        pg.start(log=quiet)
        with _admin(settings) as admin:
            admin.execute("alter system set wal_level = replica")  # postgresql.auto.conf wins over ours
        pg.stop(log=quiet)
        pg.start(log=quiet)
        with pytest.raises(StackError) as refused:
            optional.connect(settings, log=quiet)
        message = str(refused.value)
        assert "wal_level = replica" in message
        assert "`eosflow stack down && eosflow stack up --with connect`" in message
        assert ConnectService(settings).pid() is None  # no worker started
        with _admin(settings) as admin:  # and nothing made in that Postgres
            assert (
                admin.execute("select 1 from pg_roles where rolname = %s", (settings.source_user,)).fetchone()
                is None
            )
    finally:
        ConnectService(settings).stop(log=quiet)
        pg.stop(log=quiet)
        pg.reset()
