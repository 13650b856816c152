"""The randomized schedule for change streams (issue 44): a real source table, streamed by real Debezium.

Each machine is a fresh table in the stack's source database (id, email, balance, a TOASTable `notes`, a
revision), one Debezium connector of its own (a unique topic prefix; deleted at the end, which drops its
slot) and a `changes: debezium` pipeline into a state table. Its steps:

- **source transaction**: 1-6 inserts, updates (of the TOASTed text too, or leaving it out so Debezium
  sends its placeholder), primary-key updates and deletes in one transaction, some rolled back;
- **ingest** in-process; `eosflow ingest` processes **killed** at a random moment or at a fault point
  (EOSFLOW_CRASH_AT), their **retries** (same run id); **two runs at once** (a process and an in-process
  run: one may be fenced, never both); a **replay** of a committed range, which must change no state row;
- **Connect SIGKILLed** (while the source writes, or idle) and started again: the connector must go on
  exactly once (KIP-618);
- **quiescent point**: the topic, read read_committed, holds exactly the change records the committed
  source transactions make (each change once: never a duplicate, none lost), eosflow has ingested to its
  end, the state table equals the source table row for row, READ FROM THE SOURCE DATABASE (never eosflow's
  ledger or changelog), and `eosflow verify` passes (I1-I6 on the changelog, S1-S3 on the state).

After every step the changelog's own invariants (I1-I5) hold. Between quiescent points the state may lag
the source (Debezium streams asynchronously; a run ends where its plan ends), so it is compared only there.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from decimal import Decimal

import psycopg
import yaml
from confluent_kafka import Consumer, TopicPartition
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from eosflow import pipelines as pipelines_mod
from eosflow.errors import StackError
from eosflow.ledger.backfill import BackfillError, BackfillRequest
from eosflow.ledger.migrate import migrate
from eosflow.runners import backfill_run, job
from eosflow.sinks.postgres import invariants
from eosflow.verify import verify_pipeline
from eosflow_dev.stack import connect, optional
from eosflow_dev.stack.connect import ConnectService
from tests import orders
from tests.random.machine import EXIT_LABEL, Bookkeeping, _label, _quiet
from tests.random.world import spawn_ingest

CRASH_POINTS = ("after_plan", "before_read", "after_read", "after_stage", "in_commit", "after_commit")
OPS = ("insert", "update", "update_notes", "update_key", "delete")
# The records one committed change makes in the topic: a delete is `d` and its tombstone; a primary-key
# update is Debezium's delete of the old key, its tombstone and a create of the new one.
RECORDS = {"insert": 1, "update": 1, "update_notes": 1, "update_key": 3, "delete": 2}
COLUMNS = [
    {"name": "id", "type": "bigint", "required": True},
    {"name": "email", "type": "text", "required": True},
    {"name": "balance", "type": "numeric(12,2)"},
    {"name": "notes", "type": "text"},
    {"name": "rev", "type": "integer", "required": True},
]
SELECT = "select id, email, balance, notes, rev from {} order by id"
ARRIVE_S = 180.0  # how long Debezium may take to bring a committed change to the topic (after a restart too)
CATCH_UP_RUNS = 20


def notes(n: int) -> str | None:
    """Long text that does not compress (stored out of line: TOASTed), short text, or NULL."""
    if n % 3 == 0:
        return random.Random(n).randbytes(6000).hex()  # 12 kB
    return None if n % 3 == 2 else f"short {n}"


class ChangeStreamMachine(Bookkeeping):
    runner = "changes"
    kills_connect = True  # SIGKILL the Connect worker as a step (the soak's own, or the shared stack's)

    def __init__(self) -> None:
        super().__init__()
        s = self.settings
        self.home = self.workdir / self.uid
        self.home.mkdir(parents=True, exist_ok=True)
        self.pipelines_file = self.home / "pipelines.yml"
        self._old_env = os.environ.get("EOSFLOW_PIPELINES")
        os.environ["EOSFLOW_PIPELINES"] = str(self.pipelines_file)
        if not getattr(type(self), "_migrated", False):  # a fresh warehouse (the soak's stack) too
            migrate(s.warehouse_dsn, log=_quiet)
            type(self)._migrated = True
        self.details = optional.connect(s, log=_quiet)  # started if need be, as connect_server does
        self.dsn = s.warehouse_dsn
        self.source = self.details.source_conninfo
        self.table = f"cs_{self.uid}"
        self.name = f"c{self.uid}"
        self.connector = f"eosflow-random-{self.uid}"
        self.topic = f"rcs{self.uid}.public.{self.table}"
        self.changelog = f"raw.{self.name}"
        self.state = f"replica.{self.name}"
        self.next_id = 1
        self.expected = 0  # records the committed source transactions make in the topic
        self.killed: list[str] = []  # run ids of killed ingests, for their retries
        self.consumer: Consumer | None = None
        self.seen: Counter = Counter()  # (lsn, op, id) of every change record read from the topic
        self.read = 0  # records read from the topic so far
        self.registered = False
        self.violated = False
        spec = {
            "topics": [self.topic],
            "target_table": self.changelog,
            **{k: v for k, v in orders.declaration().items() if k != "business_key"},
            "columns": COLUMNS,
            "changes": "debezium",
            "primary_key": ["id"],
            "state_table": self.state,
            "transform_version": "v1",
            "initial_offset": "earliest",
            "max_records_per_partition": 100_000,
            "max_value_bytes": 1_000_000,  # the schema block and a TOASTed column: well past 4 kB
        }
        self.pipelines_file.write_text(yaml.safe_dump({"pipelines": {self.name: spec}}))
        with psycopg.connect(self.source, autocommit=True) as conn:
            conn.execute(
                f"create table {self.table} (id bigint primary key, email text not null, "
                "balance numeric(12,2), notes text, rev integer not null)"
            )
            for _ in range(3):  # rows before the connector: its snapshot reads them (op r)
                self._insert(conn, self.next_id)
                self.expected += 1
        try:
            self.registered = True
            connect.register_postgres_source(s, self.connector, [self.table], f"rcs{self.uid}")
            try:
                connect.wait_running(s, self.connector, timeout=120)
            except StackError as exc:
                raise StackError(f"{exc}{_open_transactions(s)}") from None
            self._await_records("the snapshot")
        except BaseException:
            self._clean_up()  # Hypothesis tears down only the machines it made
            raise

    def teardown(self) -> None:
        try:
            if not self.violated:  # every machine ends at a quiescent point, checked like the others
                self.history.append(f"{self.step_no + 1}. quiescent() (the machine's last)")
                self.quiescent()
        finally:
            self._clean_up()

    def _violation(self, message: str) -> None:
        self.violated = True
        super()._violation(message)

    def _clean_up(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()
        if self.registered:
            with contextlib.suppress(Exception):  # best effort: the shared worker keeps no debris
                _delete_connector(self.settings, self.connector)
        with contextlib.suppress(Exception), psycopg.connect(self.source, autocommit=True) as conn:
            conn.execute(f"drop table if exists {self.table}")
        if self._old_env is None:
            os.environ.pop("EOSFLOW_PIPELINES", None)
        else:
            os.environ["EOSFLOW_PIPELINES"] = self._old_env

    @rule(data=st.data())
    def step(self, data) -> None:
        heavy_ok = self.since_heavy >= self.heavy_gap
        names = [
            n
            for n, (w, heavy) in STEPS.items()
            for _ in range(w)
            if (heavy_ok or not heavy) and (n != "connect_killed" or self.kills_connect)
        ]
        name = data.draw(st.sampled_from(names), label="step")
        kwargs = {k: data.draw(v, label=k) for k, v in ARGS.get(name, {}).items()}
        self.history.append(
            f"{self.step_no + 1}. {name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
        )
        getattr(self, name)(**kwargs)

    # -- the source ----------------------------------------------------------------------------------
    def _insert(self, conn: psycopg.Connection, n: int) -> None:
        conn.execute(
            f"insert into {self.table} values (%s, %s, %s, %s, 1)",
            (self.next_id, f"{n}@x", Decimal(n % 100_000) / 100, notes(n)),
        )
        self.next_id += 1

    def _apply(self, conn: psycopg.Connection, ops: list[tuple[str, int]]) -> int:
        """The ops in the open transaction; returns the topic records they make once committed."""
        made = 0
        for op, n in ops:
            ids = [r[0] for r in conn.execute(f"select id from {self.table} order by id")]
            if not ids:
                op = "insert"
            if op == "insert":
                self._insert(conn, n)
            else:
                key = ids[n % len(ids)]
                if op == "update":  # notes left out: Debezium sends its placeholder for a TOASTed one
                    conn.execute(
                        f"update {self.table} set email = %s, balance = %s, rev = rev + 1 where id = %s",
                        (f"{self.step_no}-{n}@x", Decimal(n % 9_999_999) / 100, key),
                    )
                elif op == "update_notes":
                    conn.execute(
                        f"update {self.table} set notes = %s, rev = rev + 1 where id = %s", (notes(n), key)
                    )
                elif op == "update_key":  # the row moves; its TOASTed notes come from the old key
                    conn.execute(
                        f"update {self.table} set id = %s, rev = rev + 1 where id = %s", (self.next_id, key)
                    )
                    self.next_id += 1
                else:
                    conn.execute(f"delete from {self.table} where id = %s", (key,))
            made += RECORDS[op]
            self._fault(f"source {op}")
        return made

    def source_transaction(self, ops: list[tuple[str, int]], rollback: bool) -> None:
        self._begin("source transaction")
        with psycopg.connect(self.source, autocommit=True) as conn:
            try:
                with conn.transaction():
                    made = self._apply(conn, ops)
                    if rollback:
                        raise _Rollback
            except _Rollback:
                self._fault("source transaction rolled back")
                self._outcome("rolled back")
                return
        self.expected += made
        self._fault("source transaction committed")
        self._outcome(f"committed ({len(ops)} changes)")

    # -- ingesting ------------------------------------------------------------------------------------
    def _run(self, fn, what: str):
        """(label, exception) of an in-process run; a failure that is neither a commit nor a refusal is a
        violation."""
        try:
            summary = fn()
        except Exception as exc:  # noqa: BLE001 - classified below
            label = _label(exc)
            if label == "FAILED":
                self._violation(f"{what} failed: {type(exc).__name__}: {str(exc)[:800]}")
            return label, exc
        outcomes = {s.outcome for s in summary} if isinstance(summary, list) else {summary.outcome}
        return ("committed" if "committed" in outcomes else "already committed"), None

    def ingest(self, max_records: int | None) -> None:
        self._begin("ingest")
        label, exc = self._run(
            lambda: job.run(self.settings, self.name, max_records=max_records, log=_quiet), "an ingest"
        )
        self._outcome(label)
        if label not in ("committed", "already committed"):
            self._violation(f"an ingest ended {label}: {exc}")

    def ingest_crashes(self, point: str) -> None:
        """`eosflow ingest` SIGKILLing itself at a fault point (EOSFLOW_CRASH_AT)."""
        self._begin("ingest killed at a fault point", heavy=True)
        run_id = f"crash-{uuid.uuid4().hex[:8]}"
        proc = spawn_ingest(
            self.name, self.pipelines_file, self.home, ["--run-id", run_id], EOSFLOW_CRASH_AT=point
        )
        code = proc.wait()
        self._process_ended(code, proc, run_id, f"at {point}")

    def ingest_killed(self, delay: float) -> None:
        """`eosflow ingest` SIGKILLed (with its Spark JVM, if any) after a random delay."""
        self._begin("ingest killed at a random moment", heavy=True)
        run_id = f"kill-{uuid.uuid4().hex[:8]}"
        proc = spawn_ingest(self.name, self.pipelines_file, self.home, ["--run-id", run_id])
        try:
            proc.popen.wait(timeout=delay)
        except Exception:  # noqa: BLE001 - still running: the moment has come
            proc.kill()
        code = proc.wait()
        self._process_ended(code, proc, run_id, "at a random moment")

    def _process_ended(self, code: int, proc, run_id: str, where: str) -> None:
        label = EXIT_LABEL.get(code, f"exit {code}")
        self._outcome(label)
        if code == -9:
            self._fault(f"ingest SIGKILL {where}")
            self.killed.append(run_id)
        elif code != 0:
            self._violation(f"an ingest process ended {label}:\n{proc.tail(25)}")

    def retry_killed(self) -> None:
        """The orchestrator's retry: the killed run's id again, so its persisted plan is reused."""
        self._begin("retry of a killed run")
        if not self.killed:
            self._outcome("no killed run to retry")
            return
        self._retry(self.killed.pop(0))

    def _retry(self, run_id: str) -> None:
        label, exc = self._run(lambda: job.run(self.settings, self.name, run_id, log=_quiet), "a retry")
        self._outcome(f"retry {label}")
        if label not in ("committed", "already committed", "fenced"):
            self._violation(f"a retry of killed run {run_id} ended {label}: {exc}")

    def two_ingests_at_once(self, delay: float) -> None:
        """A process run and an in-process run at once: each range committed by one of them."""
        self._begin("two concurrent ingests", heavy=True)
        proc = spawn_ingest(
            self.name, self.pipelines_file, self.home, ["--run-id", f"a-{uuid.uuid4().hex[:8]}"]
        )
        time.sleep(delay)
        label, exc = self._run(
            lambda: job.run(self.settings, self.name, log=_quiet), "the second of two runs"
        )
        code = proc.wait()
        labels = {EXIT_LABEL.get(code, f"exit {code}"), label}
        self._outcome(f"process {EXIT_LABEL.get(code, code)}, in-process {label}")
        if not labels <= {"committed", "already committed", "fenced"}:
            self._violation(
                f"two concurrent runs ended: process {code}, in-process {label} {exc}\n{proc.tail(25)}"
            )
        if labels == {"fenced"}:
            self._violation("both concurrent runs were fenced: neither committed")
        if "fenced" in labels:
            self._fault("a concurrent run fenced")

    def replay(self, a: float, b: float, chunk_size: int) -> None:
        """Re-read a committed range of the changelog: every state row and changelog row stays as it was."""
        self._begin("replay backfill")
        exists = self._warehouse("select to_regclass(%s) is not null", self.changelog)[0][0]
        offsets = (
            [r[0] for r in self._warehouse(f"select kafka_offset from {self.changelog} order by 1")]
            if exists
            else []
        )
        if not offsets:
            self._outcome("nothing committed yet")
            return
        lo, hi = sorted((round(a * (len(offsets) - 1)), round(b * (len(offsets) - 1))))
        start, end = offsets[lo], offsets[hi] + 1
        before = self._state_rows(), self._changelog_in(start, end)
        request = BackfillRequest(self.name, "replay", (0,), start, end, chunk_size=chunk_size)
        try:
            chunks = backfill_run.resolve(self.settings, request)
        except BackfillError as exc:
            self._violation(f"a replay of committed offsets {start}-{end} was refused: {exc}")
        label, exc = self._run(
            lambda: backfill_run.run(
                self.settings, request, f"replay-{uuid.uuid4().hex[:8]}", chunks, log=_quiet
            ),
            "a replay",
        )
        self._outcome(f"{label} ({len(chunks)} chunks)")
        if label != "committed":
            self._violation(f"a validated replay of {start}-{end} ended {label}: {exc}")
        after = self._state_rows(), self._changelog_in(start, end)
        if after[1] != before[1]:
            self._violation(f"a replay of {start}-{end} changed the changelog's records in its range")
        if after[0] != before[0]:
            self._violation(
                f"a replay of {start}-{end} changed the state table: {_differences(before[0], after[0])}"
            )

    # -- Kafka Connect --------------------------------------------------------------------------------
    def connect_killed(self, writes: int, delay: float) -> None:
        """SIGKILL the Connect worker (while the source writes, or idle), then start it again: the
        connector goes on from the offsets it committed with its records, each change once."""
        self._begin("Connect SIGKILLed and restarted", heavy=True)
        svc = ConnectService(self.settings)
        pid = svc.pid()
        if pid is None:
            self._violation("the Connect worker was not running before its kill")
        stop = threading.Event()
        made: list[int] = []

        def write() -> None:  # one committed change per transaction, as fast as the source takes them
            with psycopg.connect(self.source, autocommit=True) as conn:
                for i in range(writes):
                    if stop.is_set():
                        return
                    with conn.transaction():
                        made.append(self._apply(conn, [("insert" if i % 3 else "update", self.step_no + i)]))

        writer = threading.Thread(target=write)
        writer.start()
        try:
            time.sleep(delay)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            self._fault("Connect worker SIGKILL")
            deadline = time.monotonic() + 30
            while svc.pid() is not None and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            writer.join()
            self.expected += sum(made)
        svc.start(log=_quiet)
        connect.wait_running(self.settings, self.connector, timeout=120)
        self._outcome(f"restarted ({len(made)} source transactions meanwhile)")

    # -- the quiescent point --------------------------------------------------------------------------
    def quiescent(self) -> None:
        """Source idle: every committed change in the topic once, ingested to the end; the state table
        equals the source table, and `eosflow verify` passes."""
        self._begin("quiescent point")
        connect.wait_running(self.settings, self.connector, timeout=120)
        self._await_records("the quiescent point")
        time.sleep(1.0)  # anything more arriving now is a change sent twice
        self._read_topic()
        if self.read != self.expected:
            self._violation(f"the topic holds {self.read} change records, the source made {self.expected}")
        for run_id in self.killed:  # the orchestrator retries every failed run
            self._retry(run_id)
        self.killed = []
        for _ in range(CATCH_UP_RUNS):
            if self._ingested_to_end():
                break
            self.ingest_once()
        else:
            self._violation(f"{CATCH_UP_RUNS} runs did not bring the ledger to the topic's end")
        source = self._source_rows()
        state = self._state_rows()
        if source != state:
            self._violation(f"the state table differs from the source table: {_differences(source, state)}")
        verdict = verify_pipeline(self.settings, self.name)
        if not verdict.ok:
            self._violation(f"eosflow verify failed at a quiescent point:\n{verdict.table()}")
        unchanged = self._warehouse(
            f"select count(*) from {self.changelog} where 'notes' = any(change_unchanged)"
        )[0][0]
        self.stats.outcomes["quiescent points: source = state, verify passed"] += 1
        self._outcome(f"{len(source)} rows equal{', TOAST placeholders kept' if unchanged else ''}")

    def ingest_once(self) -> None:
        label, exc = self._run(lambda: job.run(self.settings, self.name, log=_quiet), "a catch-up ingest")
        if label not in ("committed", "already committed"):
            self._violation(f"an ingest at a quiescent point ended {label}: {exc}")

    def _ingested_to_end(self) -> bool:
        rows = self._warehouse(
            "select next_offset from eosflow.positions where pipeline = %s and topic = %s and partition = 0",
            self.name,
            self.topic,
        )
        return bool(rows) and rows[0][0] >= self._end()

    def _end(self) -> int:
        assert self.consumer is not None
        return self.consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=30)[1]

    def _await_records(self, what: str) -> None:
        """Read the topic until it holds the records the committed source changes make (more: a
        duplicate, a violation at once; fewer after ARRIVE_S: lost)."""
        deadline = time.monotonic() + ARRIVE_S
        while True:
            self._read_topic()
            if self.read > self.expected:
                break
            if self.read == self.expected:
                return
            if time.monotonic() > deadline:
                self._violation(
                    f"{what}: the topic holds {self.read} change records {ARRIVE_S:.0f} s after the source "
                    f"made {self.expected}: {connect.status(self.settings, self.connector)}"
                )
            time.sleep(0.5)
        self._violation(
            f"{what}: the topic holds {self.read} change records, the source made {self.expected}"
        )

    def _read_topic(self) -> None:
        """Every record up to the topic's end, read_committed; a change seen twice is a violation."""
        if self.consumer is None:
            self.consumer = Consumer(
                {
                    "bootstrap.servers": self.settings.bootstrap_servers,
                    "group.id": f"random-{self.uid}",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                }
            )
            self.consumer.assign([TopicPartition(self.topic, 0, 0)])
        while True:
            msg = self.consumer.poll(5.0)
            if msg is None:
                return
            if msg.error():
                if msg.error().name() in ("_PARTITION_EOF", "UNKNOWN_TOPIC_OR_PART"):
                    return
                raise AssertionError(f"reading {self.topic}: {msg.error()}")
            self.read += 1
            if msg.value() is None:
                continue  # a tombstone: counted, its delete is the change
            payload = json.loads(msg.value())["payload"]
            image = payload["before"] if payload["op"] == "d" else payload["after"]
            change = (payload["source"]["lsn"], payload["op"], image["id"])
            self.seen[change] += 1
            if self.seen[change] > 1:
                self._violation(f"Debezium's change {change} is in the topic {self.seen[change]} times")

    # -- reading --------------------------------------------------------------------------------------
    def _warehouse(self, query: str, *params) -> list[tuple]:
        with psycopg.connect(self.dsn) as conn:
            return conn.execute(query, params).fetchall()

    def _source_rows(self) -> dict[int, tuple]:
        with psycopg.connect(self.source) as conn:
            return {r[0]: r[1:] for r in conn.execute(SELECT.format(self.table))}

    def _state_rows(self) -> dict[int, tuple]:
        with psycopg.connect(self.dsn) as conn:
            (exists,) = conn.execute("select to_regclass(%s) is not null", (self.state,)).fetchone()
            if not exists:
                return {}
            return {r[0]: r[1:] for r in conn.execute(SELECT.format(self.state))}

    def _changelog_in(self, start: int, end: int) -> list[tuple]:
        return self._warehouse(
            f"select kafka_offset, change_op, change_lsn, id from {self.changelog} "
            "where kafka_offset >= %s and kafka_offset < %s order by 1",
            start,
            end,
        )

    # -- the check after every step -------------------------------------------------------------------
    @invariant()
    def changelog_invariants_hold(self) -> None:
        declared = pipelines_mod.load(self.settings, self.name, self.pipelines_file)
        with psycopg.connect(self.dsn) as conn:
            (exists,) = conn.execute("select to_regclass(%s) is not null", (self.changelog,)).fetchone()
            found = invariants.check(conn, declared) if exists else []
        if found:
            self._violation("invariants: " + "; ".join(f"{v.invariant}: {v.detail}" for v in found[:10]))
        self.stats.seconds[self._kind] += time.monotonic() - self._step_started


def _delete_connector(settings, name: str) -> None:
    """connect.delete; a slot still held (its creation waiting on a transaction open elsewhere in the
    cluster, the walsender outliving its stopped task) is let go by ending that walsender, then dropped."""
    try:
        connect.delete(settings, name, timeout=30)
    except StackError:
        with psycopg.connect(
            connect._admin_conninfo(settings, settings.source_database), autocommit=True
        ) as conn:
            conn.execute(
                "select pg_terminate_backend(active_pid) from pg_replication_slots "
                "where slot_name = %s and active_pid is not null",
                (connect.slot_name(name),),
            )
        connect.delete(settings, name, timeout=30)


def _open_transactions(settings) -> str:
    """Why a connector may not start: creating its logical slot waits for every transaction open in the
    cluster (any database) to end."""
    with psycopg.connect(connect._admin_conninfo(settings), autocommit=True) as conn:
        rows = conn.execute(
            "select pid, datname, round(extract(epoch from now() - xact_start)), left(query, 80) "
            "from pg_stat_activity "
            "where xact_start < now() - interval '30 seconds' and backend_xid is not null"
        ).fetchall()
    if not rows:
        return ""
    return "; creating its replication slot waits for these transactions open in the cluster: " + "; ".join(
        f"pid {p} in {d}, {int(age)} s: {q}" for p, d, age, q in rows
    )


class _Rollback(Exception):
    """Ends a source transaction with a rollback."""


def _differences(want: dict[int, tuple], got: dict[int, tuple]) -> str:
    keys = sorted(set(want) | set(got))
    bad = [k for k in keys if want.get(k) != got.get(k)]

    def short(row: tuple | None) -> str:
        if row is None:
            return "absent"
        return repr(tuple(v[:24] + "..." if isinstance(v, str) and len(v) > 30 else v for v in row))

    return f"{len(bad)} of {len(keys)} keys differ: " + "; ".join(
        f"id {k}: source {short(want.get(k))}, state {short(got.get(k))}" for k in bad[:8]
    )


STEPS = {  # name -> (weight, heavy: a process or a worker restart, at most one every heavy_gap steps)
    "source_transaction": (7, False),
    "ingest": (4, False),
    "ingest_crashes": (3, True),
    "ingest_killed": (1, True),
    "retry_killed": (1, False),
    "two_ingests_at_once": (1, True),
    "replay": (2, False),
    "connect_killed": (1, True),
    "quiescent": (3, False),
}
ARGS = {
    "source_transaction": {
        "ops": st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 10**6)), min_size=1, max_size=6),
        "rollback": st.sampled_from([False, False, False, True]),
    },
    "ingest": {"max_records": st.sampled_from([None, None, 2, 5])},
    "ingest_crashes": {"point": st.sampled_from(CRASH_POINTS)},
    "ingest_killed": {"delay": st.floats(0.5, 8.0)},
    "two_ingests_at_once": {"delay": st.sampled_from([0.0, 1.0, 3.0])},
    "replay": {"a": st.floats(0, 1), "b": st.floats(0, 1), "chunk_size": st.sampled_from([2, 5, 1000])},
    "connect_killed": {"writes": st.sampled_from([0, 5, 30]), "delay": st.floats(0, 2)},
}
