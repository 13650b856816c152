"""The dbt project catches each kind of damage with exactly the matching invariant test.

One real ingest (two partitions, two runs, so every partition has two ledger ranges). Each
corruption is committed (dbt reads through connections of its own and must see it), dbt builds and
tests, and the warehouse is restored from a snapshot taken right after the ingest, in a `finally`.
At the end, on the same ingest: dbt runs in the calling process without leaving its logging,
environment or stdout changed, one invocation at a time, and a deadline still stops it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from eosflow import dbt_build
from eosflow_dev.produce import events
from eosflow_dev.produce.manifest import Manifest
from tests.integration.ingest_case import IngestCase

pytestmark = pytest.mark.integration

INVARIANT_TESTS = {
    "I1": "unique_kafka_coordinates",
    "I2": "ledger_ranges_contiguous",
    "I3": "rows_inside_committed_ranges",
    "I4": "range_counts_reconcile",
    "I5": "positions_match_ledger",
    "I6": "no_duplicate_business_keys",
}
PRODUCED = ((201, 400), (202, 300))  # (seed, count) of each produce + ingest round


@dataclass
class Ingested:
    case: IngestCase
    manifests: list[Manifest]
    conn: psycopg.Connection  # autocommit; holds the snapshot in its temp tables
    ranges: dict[int, list[tuple[int, int]]]  # partition -> its data ranges, in order

    @property
    def table(self) -> sql.Composable:
        return sql.SQL(self.case.table)

    def execute(self, statement: str, *params: Any) -> None:
        with self.conn.transaction():
            self.conn.execute(sql.SQL(statement).format(t=self.table), params)

    def dbt(self) -> dbt_build.VerifyResult:
        return dbt_build.run_dbt(self.case.settings, self.case.name, self.case.table.split(".", 1)[1])

    def snapshot(self) -> None:
        for snap, source, where in self._tables():
            query = sql.SQL("create temp table {} as select * from {} where {}")
            self.conn.execute(query.format(sql.Identifier(snap), source, where), {"p": self.case.name})

    def restore(self) -> None:
        with self.conn.transaction():
            self.conn.execute(sql.SQL("drop table if exists {}_orphan").format(self.table))
            for snap, source, where in self._tables():
                self.conn.execute(
                    sql.SQL("delete from {} where {}").format(source, where), {"p": self.case.name}
                )
                self.conn.execute(
                    sql.SQL("insert into {} select * from {}").format(source, sql.Identifier(snap))
                )

    def _tables(self) -> list[tuple[str, sql.Composable, sql.Composable]]:
        """(snapshot, table, this pipeline's rows) of every table a corruption may touch."""
        mine = sql.SQL("pipeline = %(p)s")
        return [
            ("snap_output", self.table, sql.SQL("true")),
            ("snap_rejected", sql.SQL("eosflow.rejected"), mine),
            ("snap_ledger", sql.SQL("eosflow.ledger"), mine),
            ("snap_positions", sql.SQL("eosflow.positions"), mine),
        ]


@pytest.fixture(scope="module")
def ingested(running_stack, tmp_path_factory) -> Iterator[Ingested]:
    case = IngestCase(running_stack, tmp_path_factory.mktemp("dbt") / "pipelines.yml")
    old = os.environ.get("EOSFLOW_PIPELINES")
    os.environ["EOSFLOW_PIPELINES"] = str(case.config_path)
    conn = psycopg.connect(running_stack.warehouse_dsn, autocommit=True)
    try:
        manifests = []
        for seed, count in PRODUCED:
            manifests.append(case.produce(count, seed=seed, partitions=2))
            case.ingest()
        assert case.violations() == []
        ranges: dict[int, list[tuple[int, int]]] = {}
        for partition, start, end, kind, *_ in case.ledger():
            if kind == "data" and end > start:
                ranges.setdefault(partition, []).append((start, end))
        assert [len(ranges[p]) for p in (0, 1)] == [2, 2], case.ledger()
        ing = Ingested(case, manifests, conn, ranges)
        ing.snapshot()
        yield ing
    finally:
        conn.close()
        with psycopg.connect(running_stack.warehouse_dsn, autocommit=True) as c:
            for schema in (f"analytics_{case.name}", f"analytics_failures_{case.name}"):
                c.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(schema)))
        shutil.rmtree(running_stack.state_dir / "dbt" / case.name, ignore_errors=True)
        if old is None:
            os.environ.pop("EOSFLOW_PIPELINES", None)
        else:
            os.environ["EOSFLOW_PIPELINES"] = old


@pytest.fixture(scope="module")
def clean(ingested) -> tuple[dbt_build.VerifyResult, dict[str, list[tuple]]]:
    """dbt on the untouched ingest, and the marts it built (read before any corruption)."""
    result = ingested.dbt()
    schema = f"analytics_{ingested.case.name}"
    marts = {
        name: ingested.case.query(f"select {cols} from {schema}.{name}")
        for name, cols in {
            "order_events": "event_id::text, occurrences",
            "event_counts_hourly": "event_type, event_hour_utc, events, amount_cents",
        }.items()
    }
    return result, marts


def test_clean_ingest_passes_every_test(clean):
    result, _ = clean
    assert result.ok, result.table() + "\n" + result.output[-3000:]
    found = {c.invariant: c.name for c in result.checks if c.invariant}
    assert found == INVARIANT_TESTS
    assert all(c.status == "pass" and c.failures == 0 for c in result.checks)
    assert "I1 unique_kafka_coordinates" in result.table()


def test_invariant_tests_are_described_and_severity_error(clean):
    result, _ = clean
    nodes = json.loads((result.target_dir / "manifest.json").read_text())["nodes"].values()
    tests = {n["name"]: n for n in nodes if n["resource_type"] == "test"}
    for invariant, name in INVARIANT_TESTS.items():
        assert tests[name]["description"].startswith(f"{invariant}."), name
        assert tests[name]["config"]["severity"].lower() == "error", name
    assert "idempotent producer" in tests["no_duplicate_business_keys"]["description"]


def test_marts_match_what_was_produced(ingested, clean):
    _, marts = clean
    visible = {r.event_id for m in ingested.manifests for r in m.visible()}
    produced = {}
    for seed, count in PRODUCED:
        for e in events.generate(seed, count):
            produced[e.event_id] = json.loads(e.value)
    assert len(visible) == sum(count for _, count in PRODUCED)  # the idempotent producer: all of them

    assert sorted(marts["order_events"]) == sorted((event_id, 1) for event_id in visible)

    expected: Counter[tuple[str, datetime]] = Counter()
    amounts: Counter[tuple[str, datetime]] = Counter()
    for event_id in visible:
        body = produced[event_id]
        hour = datetime.fromisoformat(body["event_time"]).replace(minute=0, second=0, microsecond=0)
        key = (body["event_type"], hour.replace(tzinfo=None))
        expected[key] += 1
        amounts[key] += body["amount_cents"]
    got = {(t, h): (n, int(a)) for t, h, n, a in marts["event_counts_hourly"]}
    assert got == {key: (expected[key], amounts[key]) for key in expected}


# -- one corruption per invariant: (the test that must fail, apply it, the failing row it must name) --


def _dup_coordinates(w: Ingested) -> dict[str, Any]:
    offset = w.ranges[1][1][0] + 2
    w.execute(
        "insert into eosflow.rejected "
        "(pipeline, kafka_topic, kafka_partition, kafka_offset, error, batch_id) "
        "select %s, kafka_topic, kafka_partition, kafka_offset, 'corrupt: dup', batch_id from {t} "
        "where kafka_partition = 1 and kafka_offset = %s",
        w.case.name,
        offset,
    )
    return {"partition": 1, "kafka_offset": offset, "copies": 2, "found_in": "output + rejected"}


def _ledger_gap(w: Ingested) -> dict[str, Any]:
    # The second range of partition 0 starts one offset later. Its first record goes too, with the
    # counts, so the rows stay inside ranges (I3) and every count still adds up (I4): only a gap.
    start = w.ranges[0][1][0]
    w.execute("delete from {t} where kafka_partition = 0 and kafka_offset = %s", start)
    w.execute(
        "update eosflow.ledger set start_offset = start_offset + 1, records_read = records_read - 1, "
        "rows_written = rows_written - 1 where pipeline = %s and partition = 0 and start_offset = %s",
        w.case.name,
        start,
    )
    return {"partition": 0, "problem": "gap", "offsets": f"[{start}, {start + 1})"}


def _ledger_overlap(w: Ingested) -> dict[str, Any]:
    # A `lost` range inside partition 1's first data range: no rows, no counts, the same end.
    w.execute(
        "insert into eosflow.ledger (pipeline, topic, partition, start_offset, end_offset, kind, batch_id, "
        "records_read, rows_written, rows_rejected) values (%s, %s, 1, 10, 20, 'lost', 'corrupt', 0, 0, 0)",
        w.case.name,
        w.case.topic,
    )
    return {"partition": 1, "problem": "overlap", "offsets": "[10, 20)", "start_offset": 10}


def _orphan_row(w: Ingested) -> dict[str, Any]:
    # The partitioned target refuses a row no child's range holds: the orphan comes in a child of its
    # own, attached by hand (restore() drops it).
    w.execute("create table {t}_orphan (like {t} including defaults)")
    w.execute(
        "insert into {t}_orphan select kafka_topic, kafka_partition, 999999, kafka_timestamp, kafka_key, "
        "kafka_headers, gen_random_uuid(), event_type, event_time, order_id, customer_id, amount_cents, "
        "currency, schema_version, batch_id, transform_version from {t} "
        "where kafka_partition = 0 order by kafka_offset limit 1"
    )
    topic = w.case.topic.replace("'", "''")  # a DDL statement takes no parameters
    w.execute(
        f"alter table {{t}} attach partition {{t}}_orphan for values from ('{topic}', 0, 999999) "
        f"to ('{topic}', 0, 1000000)"
    )
    return {"partition": 0, "kafka_offset": 999999, "covering_data_ranges": 0}


def _count_mismatch(w: Ingested) -> dict[str, Any]:
    start, end = w.ranges[0][0]
    w.execute(
        "update eosflow.ledger set records_read = records_read + 1, rows_written = rows_written + 1 "
        "where pipeline = %s and partition = 0 and start_offset = %s and kind = 'data'",
        w.case.name,
        start,
    )
    return {"partition": 0, "start_offset": start, "end_offset": end, "offsets_found": end - start}


def _stale_position(w: Ingested) -> dict[str, Any]:
    end = w.ranges[1][-1][1]
    w.execute(
        "update eosflow.positions set next_offset = next_offset - 1 where pipeline = %s and partition = 1",
        w.case.name,
    )
    return {"partition": 1, "stored_position": end - 1, "ledger_end": end}


def _producer_duplicate(w: Ingested) -> dict[str, Any]:
    # The event at partition 1 offset 5 gets the event id of partition 0 offset 3: as if the
    # producer had sent that event twice. Coordinates, ranges and counts are untouched.
    w.execute(
        "update {t} set event_id = (select event_id from {t} where kafka_partition = 0 and kafka_offset = 3) "
        "where kafka_partition = 1 and kafka_offset = 5"
    )
    return {"copies": 2, "found_at": f"{w.case.topic}[0]@3, {w.case.topic}[1]@5"}


CORRUPTIONS: dict[str, tuple[str, Callable[[Ingested], dict[str, Any]]]] = {
    "duplicate_row": ("unique_kafka_coordinates", _dup_coordinates),
    "ledger_gap": ("ledger_ranges_contiguous", _ledger_gap),
    "ledger_overlap": ("ledger_ranges_contiguous", _ledger_overlap),
    "orphan_row": ("rows_inside_committed_ranges", _orphan_row),
    "count_mismatch": ("range_counts_reconcile", _count_mismatch),
    "stale_position": ("positions_match_ledger", _stale_position),
    "producer_duplicate": ("no_duplicate_business_keys", _producer_duplicate),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_each_corruption_fails_exactly_its_test(ingested, clean, corruption):
    expected_test, corrupt = CORRUPTIONS[corruption]
    try:
        names = corrupt(ingested)
        result = ingested.dbt()
    finally:
        ingested.restore()
    assert ingested.case.violations() == []  # the restore left the warehouse as ingested

    assert not result.ok and result.returncode == 1, result.output[-3000:]
    broken = [c.name for c in result.checks if c.status in ("fail", "error")]
    assert broken == [expected_test], result.table()
    assert all(c.status == "pass" for c in result.checks if c.name != expected_test), result.table()

    failed = result.check(expected_test)
    assert failed.failures == 1 and len(failed.rows) == 1, failed
    row = failed.rows[0]
    assert {k: row.get(k) for k in names} == names, row
    if "found_at" not in names:  # every finding but I6's names topic and partition in columns
        assert row["topic"] == ingested.case.topic
    table = result.table()
    assert f"{failed.invariant} {expected_test}" in table and "FAILED: 1 offending row" in table
    assert dbt_build._render(row) in table

    if corruption == "producer_duplicate":  # the marts were still built, each event id once
        mart = f"analytics_{ingested.case.name}.order_events"
        occurrences = ingested.case.query(f"select occurrences, count(*) from {mart} group by 1")
        assert sorted(occurrences) == [(1, sum(n for _, n in PRODUCED) - 2), (2, 1)]


def test_every_invariant_has_a_corruption():
    assert {name for name, _ in CORRUPTIONS.values()} == set(INVARIANT_TESTS.values())


# -- dbt in the calling process: nothing of the caller's left changed, one invocation at a time, a deadline --
def _loggers() -> dict[str, tuple[int, list[logging.Handler], bool, bool]]:
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    return {
        lg.name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
        for lg in loggers
        if isinstance(lg, logging.Logger)
    }


def test_dbt_runs_in_this_process_and_leaves_its_logging_environment_and_stdout_as_they_were(
    ingested, clean, capfd, caplog
):
    caplog.set_level(logging.INFO)  # the caller's logging as pytest (or Airflow's task log) set it
    log = dbt_build.dbt_dirs(ingested.case.settings, ingested.case.name)[1] / "dbt.log"
    logged = log.stat().st_size
    loggers, environ, cwd, threads = _loggers(), dict(os.environ), os.getcwd(), threading.active_count()
    capfd.readouterr()

    result = ingested.dbt()

    assert result.ok and result.returncode == 0, result.output[-3000:]
    out, err = capfd.readouterr()
    assert out == "" and "Running with dbt" not in err  # dbt's console lines are in output, nowhere else
    lines = result.output.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d  Running with dbt=\S+", lines[0]), lines[:3]
    assert any(re.search(r"Done\. PASS=\d+ WARN=0 ERROR=0", line) for line in lines), lines[-5:]
    assert "Acquiring new postgres connection" not in result.output  # the console's level: info
    assert "Acquiring new postgres connection" in log.read_text()[logged:]  # dbt.log keeps debug

    after = _loggers()
    assert {name: after[name] for name in loggers} == loggers  # every logger as it was, the root's too
    new = [(n, h) for n, (_, handlers, *_) in after.items() if n not in loggers for h in handlers]
    assert all(isinstance(h, logging.NullHandler) for _, h in new), new  # dbt's own hold no stream
    assert not any("Running with dbt" in r.getMessage() for r in caplog.records)
    logging.getLogger("eosflow.tests").info("after dbt")
    assert caplog.records[-1].getMessage() == "after dbt"  # the caller's capture still works
    assert dict(os.environ) == environ and os.getcwd() == cwd
    assert threading.active_count() == threads  # dbt's thread pool and the deadline's watchdog ended


def _span(log: Path) -> tuple[str, str]:
    """(first, last) timestamp of the last invocation dbt wrote to a dbt.log."""
    last = log.read_text().rsplit("=" * 30 + " ", 1)[1]
    stamps = re.findall(r"^(\d\d:\d\d:\d\d\.\d+) \[", last, re.MULTILINE)
    return stamps[0], stamps[-1]


def test_dbt_runs_one_invocation_at_a_time_and_no_password_reaches_its_output_or_log(ingested, clean):
    """Two threads verify at once, one with a wrong password: dbt reads its profile's variables from the
    process's environment, so each must run alone, with its own; and a password is never printed."""
    settings, name = ingested.case.settings, ingested.case.name
    wrong = f"wrong-{uuid.uuid4().hex}"
    runs = {"verify": settings, "wrong_password": dataclasses.replace(settings, pg_password=wrong)}
    results: dict[str, dbt_build.VerifyResult] = {}

    def verify(purpose: str) -> None:
        results[purpose] = dbt_build.run_dbt(runs[purpose], name, name, purpose=purpose)

    threads = [threading.Thread(target=verify, args=(purpose,)) for purpose in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    good, bad = results["verify"], results["wrong_password"]
    assert good.ok and good.returncode == 0, good.output[-3000:]  # it never met the other's password
    assert bad.returncode == 2 and not bad.checks, bad.output[-3000:]  # dbt itself failed: no results
    assert "password authentication failed" in bad.output
    assert "dbt did not run (exit code 2)" in bad.table()
    bad_log = dbt_build.dbt_dirs(settings, name, "wrong_password")[1] / "dbt.log"
    assert wrong not in bad.output and wrong not in bad_log.read_text()
    good_log = dbt_build.dbt_dirs(settings, name)[1] / "dbt.log"
    spans = sorted([_span(good_log), _span(bad_log)])
    assert spans[0][1] < spans[1][0], spans  # one ended before the other began


def test_past_timeout_s_dbt_queries_are_cancelled_and_run_dbt_raises(ingested, clean):
    """In the calling process there is no child to kill: past timeout_s dbt's queries are cancelled (a
    lock held on the table keeps them waiting here) and run_dbt raises instead of returning a verdict."""
    settings, name = ingested.case.settings, ingested.case.name
    locked, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with psycopg.connect(settings.warehouse_dsn) as holder:  # a transaction: the lock until rollback
            holder.execute(sql.SQL("lock table {} in access exclusive mode").format(ingested.table))
            locked.set()
            release.wait(60)  # bounded: if nothing cancels dbt's queries, the test fails, it does not hang
            holder.rollback()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert locked.wait(30)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"ran past its 2 s and its queries were cancelled"):
            dbt_build.run_dbt(settings, name, name, timeout_s=2)
        elapsed = time.monotonic() - started
        with psycopg.connect(settings.warehouse_dsn) as conn:
            waiting = conn.execute(
                "select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
                " and datname = current_database() and query like %s and query not like 'lock table%%'",
                (f"%{name}%",),
            ).fetchone()
    finally:
        release.set()
        holder.join()
    assert waiting == (0,)  # no query of dbt's is left waiting for the lock
    assert elapsed < 45, elapsed
    assert ingested.dbt().ok  # and the next verification runs as ever
