"""A verification that runs while a commit attaches its children sees that commit whole or not at all.

Which children a statement scans is catalog state, read when Postgres plans the statement, while its rows
come from a snapshot taken after: a commit that lands between the two showed its ledger rows without its
rows (I4 "counts reconcile" failed on a healthy pipeline beside a stream: the randomized stream schedule
of 2026-11-26). The window is microseconds wide; these tests hold it open by locking the committed child
the check's statement must scan, so the statement is planned, then waits, while another run commits.
docs/DESIGN.md "Partitioned targets".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from eosflow.sinks.postgres import invariants
from eosflow.verify import verify_pipeline

pytestmark = pytest.mark.integration


@pytest.fixture
def case(running_stack, tmp_path, monkeypatch):
    from tests.integration.ingest_case import IngestCase

    c = IngestCase(running_stack, tmp_path / "pipelines.yml")
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(c.config_path))
    c.produce(60, seed=491, partitions=1)
    c.ingest()
    c.produce(40, seed=492, partitions=1)  # the next run's range: a child of its own
    return c


def _waiting_pid(conn: psycopg.Connection, relation: str) -> int | None:
    row = conn.execute(
        "select pid from pg_locks where not granted and relation = %s::regclass limit 1", (relation,)
    ).fetchone()
    return row[0] if row else None


class _Thread(threading.Thread):
    def __init__(self, name: str, work: Callable[[], object]) -> None:
        super().__init__(name=name)
        self.work, self.result = work, None

    def run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.result = exc


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _commit_beside(case, checking: _Thread, paused: Callable[[], bool], resume: Callable[[], None]) -> bool:
    """Another run commits while `checking` is paused inside its reads (`paused` says when it is);
    returns whether that commit had to wait for the check."""
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as watch:
        checking.start()
        _until(lambda: paused() or not checking.is_alive(), "the check never reached its pause")
        assert checking.is_alive(), f"the check ended before its pause: {checking.result}"
        committing = _Thread("commit", case.ingest)
        committing.start()
        _until(
            lambda: not committing.is_alive() or _waiting_pid(watch, case.table) is not None,
            "the commit neither ended nor waited for the check",
        )
        waited = committing.is_alive()
        resume()
        checking.join(180)
        committing.join(180)
    assert not isinstance(committing.result, BaseException), committing.result
    assert committing.result.outcome == "committed", committing.result
    assert case.violations() == []  # the commit itself is sound
    return waited


class _PausedBeforeI4(psycopg.Connection):
    """A connection that stops before it sends I4's statement, until the test lets it go on."""

    reached: threading.Event
    go_on: threading.Event

    def execute(self, query, params=None, **kw):  # type: ignore[override]
        if "records_read <> f.found" in str(query):
            self.reached.set()
            assert self.go_on.wait(180)
        return super().execute(query, params, **kw)


def test_the_invariant_queries_hold_commits_off_until_they_have_read(case):
    """I4 reads the ledger and the target in one statement: the one that reported a sound range broken."""
    reached, go_on = threading.Event(), threading.Event()

    def check() -> list[invariants.Violation]:
        with _PausedBeforeI4.connect(case.settings.warehouse_dsn) as conn:
            conn.reached, conn.go_on = reached, go_on
            return invariants.check(conn, case.pipeline)

    checking = _Thread("check", check)
    waited = _commit_beside(case, checking, reached.is_set, go_on.set)
    assert checking.result == [], checking.result
    assert waited, "the commit attached its range while the check was between its statements"


def test_eosflow_verify_holds_commits_off_until_it_has_read(case):
    """dbt's statements are paused on the committed child (locked by the test) once planned; which of them
    meet the commit is dbt's order, so the test asserts the wait, which keeps every one of them whole."""
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as watch:
        (child,) = watch.execute(
            "select inhrelid::regclass::text from pg_inherits where inhparent = %s::regclass", (case.table,)
        ).fetchone()
        with psycopg.connect(case.settings.warehouse_dsn) as holder:
            holder.execute(f"lock table {child} in access exclusive mode")
            checking = _Thread("verify", lambda: verify_pipeline(case.settings, case.name, marts=False))
            waited = _commit_beside(
                case, checking, lambda: _waiting_pid(watch, child) is not None, holder.rollback
            )
    verdict = checking.result
    assert not isinstance(verdict, BaseException), verdict
    assert verdict.ok, verdict.table()
    assert waited, "the commit attached its range while eosflow verify read the target"
