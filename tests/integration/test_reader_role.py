"""The view's read-only role reads what the view shows and no more (docs/DESIGN.md, "Trust boundaries"): not
a rejected record's raw payload, not an outbox's rows, not another session's query text. It counts an
outbox's waiting rows and names the open transactions through two functions eosflow owns."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from eosflow.ledger.migrate import migrate
from tests.outbox import Outbox

pytestmark = pytest.mark.integration

SECRET = "select 'the application''s secret text'"


@pytest.fixture
def reader(running_stack):
    migrate(running_stack.warehouse_dsn, log=lambda m: None)
    with psycopg.connect(running_stack.reader_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def held_open(running_stack):
    """A session of eosflow's role left idle in a transaction that has an id (the forgotten session), its
    last statement holding text no reader may see."""
    conn = psycopg.connect(running_stack.warehouse_dsn)
    conn.execute("select pg_current_xact_id()")
    conn.execute(SECRET)
    yield conn
    conn.rollback()
    conn.close()


def test_the_reader_reads_a_rejected_records_coordinates_and_reason_never_its_raw_payload(reader):
    found = reader.execute(
        "select pipeline, kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, error, batch_id "
        "from eosflow.rejected limit 1"
    ).fetchall()
    assert isinstance(found, list)
    for column in ("raw_value", "raw_key"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute(f"select {column} from eosflow.rejected limit 1")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("select * from eosflow.rejected limit 1")


def test_the_reader_reads_the_tables_the_view_shows_and_none_made_later(running_stack, reader):
    for table in ("positions", "ledger", "plans", "checks", "publish_positions"):
        reader.execute(f"select * from eosflow.{table} limit 1")
    for table in ("declarations", "pipeline_outputs", "publishers"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute(f"select * from eosflow.{table} limit 1")
    later = f"eosflow.t_later_{uuid.uuid4().hex[:8]}"  # a table a later migration makes: no grant by default
    with psycopg.connect(running_stack.warehouse_dsn, autocommit=True) as owner:
        owner.execute(f"create table {later} (x int)")
        try:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.execute(f"select * from {later}")
        finally:
            owner.execute(f"drop table {later}")


def test_the_reader_counts_an_outboxs_waiting_rows_and_cannot_read_them(case, reader, held_open):
    outbox = Outbox(case)
    waiting = "select eosflow.outbox_waiting(%s)"
    assert reader.execute(waiting, (case.name,)).fetchone()[0] is None  # it never ran
    assert outbox.publish(settle=False).rows == 0  # adds the position column, records the outbox
    with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 3)  # after held_open's transaction began: they wait for it
        (third,) = conn.execute(f"select max(eosflow_xid) from {outbox.table}").fetchone()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute(f"select * from {outbox.table}")
    assert reader.execute(waiting, (case.name,)).fetchone()[0] == 3
    after = reader.execute("select eosflow.outbox_waiting(%s, %s::xid8)", (case.name, str(third)))
    assert after.fetchone()[0] == 0
    assert reader.execute("select eosflow.outbox_waiting('no such publisher')").fetchone()[0] is None


def test_the_reader_names_open_transactions_without_their_query_text(running_stack, reader, held_open):
    pid = held_open.info.backend_pid
    # Another role's session (the reader's own, here): eosflow's role sees its age only with
    # pg_read_all_stats, which the stack grants it.
    other = psycopg.connect(running_stack.reader_dsn)
    other.execute("select pg_current_xact_id()")
    try:
        found = reader.execute("select * from eosflow.open_transactions()")
        columns, rows = [c.name for c in found.description], found.fetchall()
        assert columns == ["pid", "gid", "database", "username", "application_name", "state", "age_s"]
        mine = {r[0]: r for r in rows}
        assert mine[pid][2:6] == (running_stack.pg_database, running_stack.pg_user, "", "idle in transaction")
        assert mine[pid][6] >= 0
        theirs = mine[other.info.backend_pid]
        assert theirs[3] == running_stack.pg_reader_user and theirs[5] == "idle in transaction"
        assert theirs[6] is not None
        assert not any("secret" in str(v) for r in rows for v in r)
        (old,) = reader.execute(
            "select count(*) from eosflow.open_transactions(3600) where pid in (%s, %s)",
            (pid, other.info.backend_pid),
        ).fetchone()
        assert old == 0
    finally:
        other.rollback()
        other.close()


def test_the_reader_cannot_see_another_roles_query_text(reader, held_open):
    (query,) = reader.execute(
        "select query from pg_stat_activity where pid = %s", (held_open.info.backend_pid,)
    ).fetchone()
    assert "secret" not in query and query == "<insufficient privilege>"
    assert not reader.execute("select pg_has_role('pg_read_all_stats', 'usage')").fetchone()[0]


def test_only_the_reader_may_call_eosflows_functions(reader):
    for function in ("eosflow.outbox_waiting(text,xid8)", "eosflow.open_transactions(double precision)"):
        (public,) = reader.execute(
            "select exists (select 1 from pg_proc p, aclexplode(p.proacl) a "
            "where p.oid = to_regprocedure(%s) and a.grantee = 0)",
            (function,),
        ).fetchone()
        assert not public, f"{function} is executable by PUBLIC"
        assert reader.execute(
            "select p.prosecdef and p.proconfig = '{\"search_path=pg_catalog, pg_temp\"}' "
            "from pg_proc p where p.oid = to_regprocedure(%s)",
            (function,),
        ).fetchone()[0]


def test_what_the_reader_may_not_call_is_named_with_the_grant(running_stack, reader):
    from eosflow.observe.health import _cannot_call, _hidden_sessions

    role = running_stack.pg_reader_user
    assert _cannot_call(reader, "eosflow.outbox_waiting(text,xid8)", role) is None
    assert "has no eosflow.t_missing(text)" in _cannot_call(reader, "eosflow.t_missing(text)", role)
    withheld = f"eosflow.t_withheld_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(running_stack.warehouse_dsn, autocommit=True) as owner:
        owner.execute(f"create function {withheld}() returns int language sql as 'select 1'")
        owner.execute(f"revoke execute on function {withheld}() from public")
        try:
            said = _cannot_call(reader, f"{withheld}()", role)
            assert (
                said == f"{role} may not call {withheld}(): GRANT EXECUTE ON FUNCTION {withheld}() TO {role}"
            )
        finally:
            owner.execute(f"drop function {withheld}()")
    assert _hidden_sessions(reader) is None  # the stack's owner role sees every session's state and age


def test_the_view_names_what_holds_a_publisher_back_as_the_reader(case, running_stack, held_open):
    from eosflow.observe.state import publisher_snapshot

    outbox = Outbox(case)
    assert outbox.publish(settle=False).rows == 0
    with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 2)
    (seen,) = publisher_snapshot(outbox.settings, [outbox.publisher])
    assert seen.error is None and seen.health.judged and seen.health.unseen is None, seen
    assert seen.health.held == 2 and seen.health.blocked_s is not None
    (line,) = [b for b in seen.health.blockers if f"pid {held_open.info.backend_pid} " in b]
    assert f"user {running_stack.pg_user}, idle in transaction, open " in line and "secret" not in line
