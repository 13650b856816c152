"""The randomized schedule for the publisher (issue 27): an outbox written every way, published every way.

Each machine is a fresh outbox table (id, aggregate key, a tag, and a column of each awkward Postgres type)
declared as a publisher. Its steps:

- **insert**: 1-8 rows in one transaction that commits at once, rolls back, or stays open across steps
  (then committed or rolled back later, in any order: out-of-order commits); rows of every kind: ordinary,
  all NULL, double NaN and +-Infinity, numeric NaN (dead letters), +-infinity dates and timestamps,
  intervals, inet, ranges, bytea, jsonb, arrays, and rows above Kafka's message size (dead letters);
- **publish** in-process; **publish killed** (`eosflow publish` SIGKILLed at a random moment, or at
  publish_before_batch / publish_in_transaction / publish_after_commit); **two publishers at once** (a
  process and an in-process run: one may be fenced, never both publish a row).

After every step the topic and its dead-letter topic are read back read_committed and compared with the
model, built from what the machine's own transactions did (never from eosflow's position): every record
is a committed row, once, in the topic or in the dead-letter topic as its kind says, with its own content;
per key, rows come in (transaction, id) order; no record seen earlier disappears. At a quiescent point (a
publish after every transaction of the cluster below the horizon, none held open by the machine) every
committed row is there.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import psycopg
import yaml
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from eosflow.publish import outbox
from eosflow.publish.declaration import load_publisher
from eosflow.publish.run import PublisherFencedError, publish
from eosflow.settings import Settings
from eosflow.sources.kafka.read_back import partitions_of, read_to_end
from tests.random.machine import Bookkeeping
from tests.random.world import Proc

# kind -> the columns' values (SQL literals); DEAD: the kinds that must go to the dead-letter topic.
KINDS: dict[str, dict[str, str]] = {
    "plain": {
        "d": "1.5",
        "n": "12.340",
        "ts": "'2026-01-02T03:04:05Z'",
        "dt": "'2026-01-02'",
        "j": "'{\"a\": [1, 2]}'",
    },
    "nulls": {},
    "nan_double": {"d": "'NaN'"},
    "infinite_double": {"d": "'-Infinity'"},
    "nan_numeric": {"n": "'NaN'"},
    "infinite_instants": {"ts": "'infinity'", "dt": "'-infinity'"},
    "odd_types": {
        "iv": "'1 mon 2 days 03:00:04.5'",
        "ip": "'10.1.2.3/8'",
        "rg": "'[1,5)'",
        "b": "'\\x00ff'::bytea",
        "arr": "'{1,NULL,3}'",
        "j": '\'{"nested": {"x": null}}\'',
    },
    "oversized": {"big": "repeat('x', 1100000)"},
}
DEAD = frozenset({"nan_double", "infinite_double", "nan_numeric", "oversized"})
POINTS = ("publish_before_batch", "publish_in_transaction", "publish_after_commit")
EXIT = {0: "published", 3: "fenced", -9: "killed"}


@dataclass(frozen=True)
class Row:
    id: int
    kind: str
    tag: str
    key: str


class PublisherMachine(Bookkeeping):
    runner = "publisher"

    def __init__(self) -> None:
        super().__init__()
        self.home = self.workdir / f"pub-{self.uid}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.name = f"p{self.uid}"
        self.table = f"outbox.{self.name}"
        self.topic = f"published.random.{self.uid}"
        self.dsn = self.settings.warehouse_dsn
        self.pipelines_file = self.home / "pipelines.yml"
        spec = {
            "table": self.table,
            "topic": self.topic,
            "id": "id",
            "key": "agg",
            "batch_rows": 3,
            "batch_seconds": 0.1,
        }
        self.pipelines_file.write_text(yaml.safe_dump({"publishers": {self.name: spec}}))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("create schema if not exists outbox")
            conn.execute(
                f"create table {self.table} (id bigserial primary key, agg text not null, tag text not null, "
                "d double precision, n numeric, ts timestamptz, dt date, iv interval, ip inet, rg int4range, "
                "b bytea, j jsonb, arr int[], big text)"
            )
        self.publisher = load_publisher(self.settings, self.name, self.pipelines_file)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            # The position column, as the outbox's own migration adds it: the publisher's first run may
            # not add it while a transaction holds the table (it refuses, saying so).
            outbox.prepare(conn, self.publisher, log=lambda m: None)
        self.rows: dict[int, Row] = {}
        self.committed: set[int] = set()
        self.rolled_back: set[int] = set()
        self.held: list[tuple[psycopg.Connection, list[int]]] = []  # open transactions, across steps
        self.seen: set[tuple[str, int]] = set()
        self.complete = False

    def teardown(self) -> None:
        for conn, _ in self.held:
            with contextlib.suppress(Exception):
                conn.rollback()
                conn.close()
        self.held = []

    @rule(data=st.data())
    def step(self, data) -> None:
        heavy_ok = self.since_heavy >= self.heavy_gap
        names = [n for n, (w, heavy) in STEPS.items() for _ in range(w) if heavy_ok or not heavy]
        name = data.draw(st.sampled_from(names), label="step")
        kwargs = {k: data.draw(v, label=k) for k, v in ARGS[name].items()}
        self.history.append(
            f"{self.step_no + 1}. {name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
        )
        getattr(self, name)(**kwargs)

    # -- writing the outbox ------------------------------------------------------------------------
    def insert(self, kinds: list[str], fate: str, keys: int) -> None:
        self._begin("insert")
        if fate == "hold" and len(self.held) >= 3:
            fate = "commit"
        conn = psycopg.connect(self.dsn)
        ids = []
        for i, kind in enumerate(kinds):
            tag, key = uuid.uuid4().hex[:10], f"k{i % keys}"
            values = {"agg": f"'{key}'", "tag": f"'{tag}'", **KINDS[kind]}
            columns, literals = ", ".join(values), ", ".join(values.values())
            (row_id,) = conn.execute(
                f"insert into {self.table} ({columns}) values ({literals}) returning id"
            ).fetchone()
            self.rows[row_id] = Row(row_id, kind, tag, key)
            ids.append(row_id)
            self._fault(f"row: {kind}")
        if fate == "commit":
            conn.commit()
            conn.close()
            self.committed |= set(ids)
        elif fate == "rollback":
            conn.rollback()
            conn.close()
            self.rolled_back |= set(ids)
            self._fault("transaction rolled back")
        else:
            self.held.append((conn, ids))
            self._fault("transaction held open")
        self._outcome(fate)

    def finish_held(self, which: int, commit: bool) -> None:
        """Commit or roll back one of the open transactions: later-begun ones may commit first."""
        self._begin("held transaction finished")
        if not self.held:
            self._outcome("none held")
            return
        i = which % len(self.held)
        conn, ids = self.held.pop(i)
        if i < len(self.held):
            self._fault("committed out of order")
        (conn.commit if commit else conn.rollback)()
        conn.close()
        (self.committed if commit else self.rolled_back).update(ids)
        self._outcome("committed" if commit else "rolled back")

    # -- publishing ----------------------------------------------------------------------------------
    def _settled(self, timeout: float = 30.0) -> bool:
        """Every transaction of the cluster that began before now has ended (the publisher's horizon)."""
        if self.held:
            return False
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            (now,) = conn.execute("select pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                (xmin,) = conn.execute(
                    "select pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
                ).fetchone()
                if xmin >= now:
                    return True
                time.sleep(0.2)
        return False

    def _publish(self, what: str):
        try:
            return publish(self.settings, self.publisher, log=lambda m: None), None
        except PublisherFencedError as exc:
            return None, exc
        except Exception as exc:  # noqa: BLE001 - a violation, with the reason
            self._violation(f"{what} failed: {type(exc).__name__}: {exc}")

    def publish_now(self) -> None:
        self._begin("publish")
        settled = self._settled()
        summary, exc = self._publish("a publish")
        if exc is not None:
            self._violation(f"a lone publisher was fenced: {exc}")
        self._outcome("published rows" if summary.rows else "nothing new")
        self.complete = settled

    def _spawn(self, *args: str, **env: str) -> Proc:
        log = self.home / f"publish-{uuid.uuid4().hex[:6]}.log"
        with log.open("w") as fh:
            popen = subprocess.Popen(
                [sys.executable, "-m", "eosflow.cli", "publish", "--pipeline", self.name, *args],
                env={**os.environ, "EOSFLOW_PIPELINES": str(self.pipelines_file), **env},
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return Proc(popen, log, time.monotonic())

    def publish_killed(self, delay: float, point: str | None) -> None:
        """`eosflow publish` SIGKILLed at a random moment or at a fault point; the next publish goes on."""
        self._begin("publish killed", heavy=True)
        proc = self._spawn(**({"EOSFLOW_CRASH_AT": point} if point else {}))
        if point is None:
            try:
                proc.popen.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.kill()
        code = proc.wait(120)
        self._outcome(EXIT.get(code, f"exit {code}") + (f" at {point}" if point and code == -9 else ""))
        if code == -9:
            self._fault(f"SIGKILL at {point}" if point else "SIGKILL at a random moment")
        elif code != 0:
            self._violation(f"eosflow publish ended {code}:\n{proc.tail(25)}")

    def two_publishers(self, delay: float) -> None:
        """Two `eosflow publish --follow` processes of one publisher, the second started `delay` later:
        the second fences the first (which stops at its next commit), never do both publish a row."""
        self._begin("two publishers at once", heavy=True)
        with psycopg.connect(self.dsn) as conn:  # work for both: ten batches of batch_rows 3
            for _ in range(30):
                tag = uuid.uuid4().hex[:10]
                (row_id,) = conn.execute(
                    f"insert into {self.table} (agg, tag) values ('race', %s) returning id", (tag,)
                ).fetchone()
                self.rows[row_id] = Row(row_id, "plain", tag, "race")
                self.committed.add(row_id)
        first = self._spawn("--follow", "--max-seconds", "8")
        time.sleep(delay)
        second = self._spawn("--follow", "--max-seconds", "8")
        codes = (first.wait(120), second.wait(120))
        self._outcome(f"first {EXIT.get(codes[0], codes[0])}, second {EXIT.get(codes[1], codes[1])}")
        if not set(codes) <= {0, 3} or codes == (3, 3):
            self._violation(
                f"two publishers ended {codes}:\n{first.tail(15)}\n--- second:\n{second.tail(15)}"
            )
        if 3 in codes:
            self._fault("publisher fenced")

    # -- the check after every step ----------------------------------------------------------------
    @invariant()
    def topics_match_the_outbox(self) -> None:
        records = _read(self.settings, (self.topic, self.publisher.rejected_topic))
        published, dead = records[self.topic], records[self.publisher.rejected_topic]
        bad: list[str] = []
        ids = Counter(i for i, _, _ in published) + Counter(i for i, _, _ in dead)
        bad += [f"row {i} published {n} times" for i, n in ids.items() if n > 1]
        order: dict[str, list] = {}
        for where, records in (("topic", published), ("dead letters", dead)):
            for row_id, xid, value in records:
                row = self.rows.get(row_id)
                if row is None:
                    bad.append(f"{where}: row {row_id} was never inserted here")
                    continue
                if row_id not in self.committed:
                    state = "rolled back" if row_id in self.rolled_back else "not committed yet"
                    bad.append(f"{where}: row {row_id} ({row.kind}) is {state}")
                if (where == "dead letters") != (row.kind in DEAD):
                    bad.append(f"{where}: row {row_id} of kind {row.kind} is in the wrong topic")
                if value is not None and (value.get("tag") != row.tag or value.get("agg") != row.key):
                    bad.append(
                        f"{where}: row {row_id} carries {value.get('tag')}/{value.get('agg')}, not its own"
                    )
                if where == "topic":
                    order.setdefault(row.key, []).append((xid, row_id))
        for key, seq in order.items():
            if seq != sorted(seq):
                bad.append(f"key {key}: rows out of (transaction, id) order: {seq[:8]}")
        present = {("t", i) for i, _, _ in published} | {("d", i) for i, _, _ in dead}
        gone = self.seen - present
        if gone:
            bad.append(f"{len(gone)} record(s) seen earlier are gone: {sorted(gone)[:5]}")
        if self.complete:
            missing = sorted(self.committed - set(ids))
            if missing:
                bad.append(f"{len(missing)} committed row(s) missing at a quiescent point: {missing[:8]}")
            self.stats.outcomes["quiescent points checked complete"] += 1
        self.seen |= present
        self.complete = False
        self.stats.seconds[self._kind] += time.monotonic() - self._step_started
        if bad:
            self._violation("the topics differ from the outbox's model:\n  " + "\n  ".join(bad[:12]))


STEPS = {  # name -> (weight, heavy)
    "insert": (6, False),
    "finish_held": (2, False),
    "publish_now": (4, False),
    "publish_killed": (2, True),
    "two_publishers": (1, True),
}
ARGS = {
    "insert": {
        "kinds": st.lists(
            st.sampled_from([k for k in KINDS if k != "oversized"] * 4 + ["oversized"]),
            min_size=1,
            max_size=8,
        ),
        "fate": st.sampled_from(["commit", "commit", "rollback", "hold"]),
        "keys": st.integers(1, 3),
    },
    "finish_held": {"which": st.integers(0, 10), "commit": st.booleans()},
    "publish_now": {},
    "publish_killed": {"delay": st.floats(0.5, 8.0), "point": st.none() | st.sampled_from(POINTS)},
    "two_publishers": {"delay": st.floats(0.0, 3.0)},
}


def _read(settings: Settings, topics: tuple[str, ...]) -> dict[str, list[tuple[int, int, dict | None]]]:
    """(row id, xid, value) of each record of each topic, read_committed, in one consumer."""
    out: dict[str, list] = {t: [] for t in topics}
    starts = [(t, p, -2) for t in topics for p in partitions_of(settings.kafka, t)]
    for m in read_to_end(settings.kafka, starts, idle_s=30):
        h = dict(m.headers())
        value = m.value()
        out[m.topic()].append(
            (int(h["eosflow-row-id"]), int(h["eosflow-xid"]), json.loads(value) if value else None)
        )
    return out
