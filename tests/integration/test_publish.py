"""`eosflow publish`: an outbox's rows into Kafka with their position in the same transaction, against the
real broker and Postgres: rows whose transactions commit out of order, a publisher killed inside its
transaction, and a zombie publisher."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter

import psycopg
import pytest

from eosflow.publish import position
from tests.kafka_reader import read_all
from tests.outbox import Outbox

pytestmark = pytest.mark.integration


@pytest.fixture
def outbox(case) -> Outbox:
    return Outbox(case)


def test_every_committed_row_is_published_once_with_its_key_and_id(outbox):
    with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 120, "customer-7")
    first = outbox.publish()
    assert (first.rows, first.transactions) == (120, 3)  # batches of at most 50 rows
    assert outbox.publish().rows == 0  # nothing new: no transaction at all
    records = read_all(outbox.settings, outbox.topic)
    assert outbox.published_ids() == Counter(outbox.ids()) and len(records) == 120
    assert {m.key() for m in records} == {b"customer-7"}
    body = json.loads(records[0].value())
    assert set(body) == {"id", "aggregate", "body", "at"} and body["body"] == {"i": 0}


def test_rows_committed_out_of_order_are_each_published_once(outbox):
    dsn = outbox.settings.warehouse_dsn
    assert outbox.publish().rows == 0  # the first run adds the position column: before any writer
    early = psycopg.connect(dsn)  # takes its transaction id first, commits last
    outbox.insert(early, 1, "early")
    with psycopg.connect(dsn, autocommit=True) as conn:
        outbox.insert(conn, 1, "late")  # a later transaction, committed first: its id is larger
    assert outbox.publish(settle=False).rows == 0  # held back: an older transaction is still open
    early.commit()
    early.close()
    assert outbox.publish().rows == 2
    assert [m.key() for m in read_all(outbox.settings, outbox.topic)] == [
        b"early",
        b"late",
    ]  # commit-safe order

    # Writers committing out of order while the publisher runs: every row once, none skipped.
    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(dsn) as conn:
            for _ in range(20):
                outbox.insert(conn, rng.randint(1, 3), f"w{seed}")
                time.sleep(rng.random() * 0.05)  # the transaction stays open a while
                conn.commit()

    publishing = threading.Thread(target=lambda: outbox.publish(follow=True, max_seconds=8))
    publishing.start()
    writers = [threading.Thread(target=writer, args=(s,)) for s in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    publishing.join()
    outbox.publish()  # what committed after the follower stopped
    published = outbox.published_ids()
    assert published == Counter(outbox.ids()), "every row exactly once"


def test_adding_the_position_column_gives_up_instead_of_stalling_the_writers(outbox):
    from eosflow.pipelines import PipelineConfigError

    busy = psycopg.connect(outbox.settings.warehouse_dsn)
    outbox.insert(busy, 1)  # an open transaction on the outbox
    try:
        with pytest.raises(
            PipelineConfigError, match='waited 5 s.*alter table .* add column "eosflow_xid" xid8'
        ):
            outbox.publish()
    finally:
        busy.commit()
        busy.close()
    assert outbox.publish().rows == 1


def test_a_publisher_killed_inside_its_transaction_publishes_nothing_twice(outbox):
    with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 120)
    killed = outbox.cli(EOSFLOW_CRASH_AT="publish_in_transaction")
    _, err = killed.communicate(timeout=120)
    assert killed.returncode == -9 and "SIGKILL at publish_in_transaction" in err
    assert outbox.published_ids() == Counter()  # its batch was produced, never committed
    assert len(read_all(outbox.settings, outbox.topic, "read_uncommitted")) == 50
    done = outbox.cli()
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err[-2000:]
    assert outbox.published_ids() == Counter(outbox.ids())


def test_a_zombie_publisher_is_fenced_by_the_next_one(outbox, tmp_path):
    with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 60)
    zombie = outbox.cli(EOSFLOW_PAUSE_AT="publish_in_transaction", EOSFLOW_FAULT_DIR=str(tmp_path))
    deadline = time.monotonic() + 120
    while not (tmp_path / "publish_in_transaction.paused").exists():
        assert zombie.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    newer = outbox.publish()  # fences the zombie, aborts its open batch, publishes everything
    assert newer.rows == 60
    (tmp_path / "publish_in_transaction.resume").write_text("go")
    _, err = zombie.communicate(timeout=120)
    assert zombie.returncode == 3 and "fenced" in err, err[-2000:]
    assert outbox.published_ids() == Counter(outbox.ids())


def test_the_at_least_once_comparison_publishes_a_batch_twice_when_killed_before_storing_its_position(case):
    outbox = Outbox(case, delivery="at_least_once")
    with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 120)
    killed = outbox.cli(EOSFLOW_CRASH_AT="publish_in_transaction")
    _, err = killed.communicate(timeout=120)
    assert killed.returncode == -9, err[-2000:]
    assert sum(outbox.published_ids().values()) == 50  # delivered, visible, position not stored
    done = outbox.cli()
    _, err = done.communicate(timeout=120)
    assert done.returncode == 0, err[-2000:]
    published = outbox.published_ids()
    assert set(published) == set(outbox.ids())  # nothing lost...
    assert sorted(n for n in published.values() if n > 1) == [2] * 50  # ...and the first batch twice


def _outbox_table(case, columns: str, rows_sql: list[str], **declared) -> Outbox:
    """An outbox of the given columns (the publisher's id: `id`), filled by `rows_sql`, declared."""
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        conn.execute("create schema if not exists outbox")
        conn.execute(f"create table outbox.{case.name}_x ({columns})")
        for statement in rows_sql:
            conn.execute(statement.format(t=f"outbox.{case.name}_x"))
    return Outbox(case, table=f"outbox.{case.name}_x", **declared)


def _headers(message) -> dict[str, bytes]:
    return dict(message.headers() or [])


def test_a_nan_row_goes_to_the_dead_letter_topic_with_its_reason_and_the_rest_is_published(case):
    """Once a NaN stopped every publish (a json ValueError) and the position never moved."""
    outbox = _outbox_table(
        case,
        "id bigint primary key, aggregate text not null, x double precision, n numeric",
        [
            "insert into {t} values (1, 'a', 1.5, 1), (2, 'a', 'NaN', 2), (3, 'a', 2.5, 'NaN')",
            "insert into {t} values (4, 'a', 3.5, 4)",
            "insert into {t} values (5, 'b', '-Infinity', 5), (6, 'b', 6.5, 6)",
        ],
        batch_rows=2,
    )
    first = outbox.publish()
    assert (first.rows, first.rejected) == (6, 3)
    published = read_all(outbox.settings, outbox.topic)
    assert sorted(json.loads(m.value())["id"] for m in published) == [1, 4, 6]
    dead = read_all(outbox.settings, outbox.publisher.rejected_topic)
    reasons = {int(_headers(m)["eosflow-row-id"]): _headers(m)["eosflow-error"].decode() for m in dead}
    assert sorted(reasons) == [2, 3, 5]
    assert "column 'x' holds nan" in reasons[2] and "column 'n' holds NaN" in reasons[3]
    assert {_headers(m)["eosflow-table"] for m in dead} == {outbox.publisher.table.encode()}
    assert json.loads(dead[0].value())["aggregate"] in ("a", "b")  # the row itself, NaN as text
    assert outbox.publish().rows == 0  # the position moved past all of them


def test_postgres_types_json_has_no_literal_for_are_published_in_their_natural_form(case):
    outbox = _outbox_table(
        case,
        "id bigint primary key, aggregate text not null, d date, ts timestamptz, i interval, "
        "a inet, r int4range, e int4range",
        [
            "insert into {t} values (1, 'a', 'infinity', '-infinity', '1 mon 2 days 03:04:05.5', "
            "'10.0.0.1/24', '[1,5)', 'empty')",
            "insert into {t} values (2, 'a', '2026-01-02', '2026-01-02 03:04:05+00', '-90 seconds', "
            "'::1', '(,7]', null)",
        ],
    )
    assert outbox.publish().rows == 2
    body = {
        json.loads(m.value())["id"]: json.loads(m.value()) for m in read_all(outbox.settings, outbox.topic)
    }
    assert (body[1]["d"], body[1]["ts"]) == ("infinity", "-infinity")
    assert body[1]["i"] == "P1M2DT3H4M5.5S" and body[2]["i"] == "PT-1M-30S"
    assert body[1]["a"] == "10.0.0.1/24" and body[2]["a"] == "::1"
    assert body[1]["r"] == {"lower": 1, "upper": 5, "bounds": "[)"} and body[1]["e"] == {"empty": True}
    assert body[2]["r"] == {"lower": None, "upper": 8, "bounds": "()"} and body[2]["e"] is None


def test_a_row_larger_than_a_kafka_message_is_a_dead_letter_naming_it(case):
    outbox = _outbox_table(
        case,
        "id bigint primary key, aggregate text not null, body text",
        ["insert into {t} values (1, 'a', 'small'), (2, 'a', repeat('x', 1100000)), (3, 'a', 'small')"],
    )
    summary = outbox.publish()
    assert (summary.rows, summary.rejected) == (3, 1)
    assert sorted(json.loads(m.value())["id"] for m in read_all(outbox.settings, outbox.topic)) == [1, 3]
    (dead,) = read_all(outbox.settings, outbox.publisher.rejected_topic)
    assert dead.value() is None and _headers(dead)["eosflow-row-id"] == b"2"
    assert b"above message.max.bytes" in _headers(dead)["eosflow-error"]


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_a_row_above_its_topics_max_message_bytes_is_a_dead_letter_not_lost_or_stuck(case, delivery):
    """The topic's own max.message.bytes (below the producer's) refused the record at the broker: at least
    once lost it silently (the position moved past it), exactly once failed every run."""
    from eosflow.kafka_admin import ensure_topic

    outbox = _outbox_table(
        case,
        "id bigint primary key, aggregate text not null, body text",
        ["insert into {t} values (1, 'a', 'small'), (2, 'a', repeat('x', 20000)), (3, 'a', 'small')"],
        delivery=delivery,
    )
    ensure_topic(outbox.settings.bootstrap_servers, outbox.topic, 1, config={"max.message.bytes": "8192"})
    summary = outbox.publish()
    assert (summary.rows, summary.rejected) == (3, 1)
    assert sorted(json.loads(m.value())["id"] for m in read_all(outbox.settings, outbox.topic)) == [1, 3]
    (dead,) = read_all(outbox.settings, outbox.publisher.rejected_topic)
    assert dead.value() is None and _headers(dead)["eosflow-row-id"] == b"2"
    assert f"{outbox.topic}'s max.message.bytes (8,192)".encode() in _headers(dead)["eosflow-error"]


def test_an_at_least_once_batch_the_broker_refused_keeps_its_position(case):
    """at_least_once stored the position after flush() whether or not the records were delivered: a
    topic that refuses them (here: no record older than its arrival, message.timestamp.before.max.ms 0)
    lost the batch silently."""
    from eosflow.kafka_admin import ensure_topic

    outbox = Outbox(case, delivery="at_least_once")
    with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 3)
    strict = {"message.timestamp.before.max.ms": "0"}
    ensure_topic(outbox.settings.bootstrap_servers, outbox.topic, 1, config=strict)
    with pytest.raises(RuntimeError, match="not delivered .*the position was not stored"):
        outbox.publish()
    with psycopg.connect(outbox.settings.warehouse_dsn) as conn:
        assert position.read_stored(conn, outbox.publisher) is None


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_a_keyless_row_for_a_compacted_topic_is_a_dead_letter_not_lost_or_stuck(case, delivery):
    """A compacted topic refuses a record without a key: exactly once failed every run on such a row,
    at least once lost its batch."""
    from eosflow.kafka_admin import ensure_topic

    outbox = _outbox_table(
        case,
        "id bigint primary key, aggregate text, body text",
        ["insert into {t} values (1, null, 'keyless'), (2, 'a', 'keyed')"],
        delivery=delivery,
    )
    ensure_topic(outbox.settings.bootstrap_servers, outbox.topic, 1, config={"cleanup.policy": "compact"})
    summary = outbox.publish()
    assert (summary.rows, summary.rejected) == (2, 1)
    assert [json.loads(m.value())["id"] for m in read_all(outbox.settings, outbox.topic)] == [2]
    (dead,) = read_all(outbox.settings, outbox.publisher.rejected_topic)
    assert _headers(dead)["eosflow-row-id"] == b"1"
    assert f"{outbox.topic} is compacted".encode() in _headers(dead)["eosflow-error"]
    assert json.loads(dead.value())["body"] == "keyless"  # the row itself: nothing is lost


@pytest.mark.parametrize(
    ("columns", "missing"),
    [
        ("id bigint unique, aggregate text not null", "NOT NULL"),
        ("id bigint not null, aggregate text not null", "unique"),
    ],
)
def test_an_id_that_can_be_null_or_repeat_is_refused_before_anything_is_published(case, columns, missing):
    """Once a NULL id was committed as the position "null" and every later run failed on it."""
    from eosflow.pipelines import PipelineConfigError

    outbox = _outbox_table(case, columns, ["insert into {t} values (1, 'a'), (2, 'a')"])
    with pytest.raises(PipelineConfigError, match=f"is not {missing}.*Nothing was published"):
        outbox.publish(settle=False)
    assert read_all(outbox.settings, outbox.topic) == []


def test_bytea_ids_move_the_position_without_skipping_or_repeating_a_row(case):
    """The position once held a bytea id escaped twice: the next batch started from the wrong row."""
    outbox = _outbox_table(
        case,
        "id bytea primary key, aggregate text not null",
        ["insert into {t} select decode(lpad(to_hex(g), 4, '0'), 'hex'), 'a' from generate_series(1, 7) g"],
        batch_rows=2,
    )
    assert outbox.publish().rows == 7
    ids = [_headers(m)["eosflow-row-id"] for m in read_all(outbox.settings, outbox.topic)]
    assert sorted(ids) == sorted({*ids}) and len(ids) == 7
    assert outbox.publish().rows == 0


def test_a_read_back_that_stops_short_of_the_end_fails_instead_of_deciding(case):
    """A publisher's position read gave up quietly after 30 s without progress; the publisher then took
    "no position" for a first run and published the whole outbox again. A partition that never reaches its
    end (here: one the topic does not have) now fails the read, after the records it did read."""
    from eosflow.kafka_admin import ensure_topic
    from eosflow.sources.kafka.read_back import ReadBackIncompleteError, read_to_end

    topic = f"readback.{case.name}"
    ensure_topic(case.settings.bootstrap_servers, topic, 1, log=lambda m: None)
    with pytest.raises(ReadBackIncompleteError, match=rf"{topic}\[3\] back stopped short of the end"):
        list(read_to_end(case.settings.kafka, [(topic, 0, -2), (topic, 3, -2)], idle_s=2))


def test_a_position_ahead_of_a_restored_warehouse_is_refused_not_silently_idle(case):
    """A warehouse restored from a backup rewinds its transaction counter: the publisher sent nothing and
    exited 0 until new transaction ids passed its position, skipping every row inserted in between."""
    outbox = Outbox(case, delivery="at_least_once")  # its position is in Postgres: simple to wind on
    with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 3)
    assert outbox.publish().rows == 3
    with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
        conn.execute(
            "update eosflow.publish_positions set xid = xid + 1000000000 where publisher = %s", (case.name,)
        )
        outbox.insert(conn, 2)  # inserted "after the restore": below the position
    done = outbox.cli()
    _, err = done.communicate(timeout=120)
    assert done.returncode == 2, err[-2000:]
    assert "is ahead of this warehouse" in err and "delete its row of eosflow.publish_positions" in err
    assert sum(outbox.published_ids().values()) == 3


def test_a_publisher_held_back_by_an_open_transaction_says_which_one(case):
    """A publisher waits, by design, for every older transaction of the cluster: a session left idle in a
    transaction stalled it without a word."""
    from eosflow.publish.run import publish

    outbox = Outbox(case)
    assert outbox.publish(settle=False).rows == 0  # adds the position column
    blocker = psycopg.connect(outbox.settings.warehouse_dsn)
    blocker.execute("select pg_current_xact_id()")  # open, with a transaction id: the forgotten session
    try:
        with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
            outbox.insert(conn, 3)
        lines: list[str] = []
        assert publish(outbox.settings, outbox.publisher, log=lines.append).rows == 0
        (said,) = [line for line in lines if "wait for older transactions" in line]
        assert "3 committed row(s)" in said and f"pid {blocker.info.backend_pid} " in said
        assert "idle in transaction" in said
    finally:
        blocker.rollback()
        blocker.close()
    assert outbox.publish().rows == 3


def test_the_views_reader_sees_a_publishers_position_waiting_rows_and_what_holds_them(case):
    """The Airflow view reads as the read-only role, which could neither read an outbox nor see other
    roles' sessions: publishers were missing from it. It counts the waiting rows and names the open
    transactions through eosflow's functions (tests/integration/test_reader_role.py), reading neither."""
    from eosflow.observe.state import publisher_snapshot

    outbox = Outbox(case)
    assert outbox.publish(settle=False).rows == 0  # adds the position column, records the outbox
    blocker = psycopg.connect(outbox.settings.warehouse_dsn)
    blocker.execute("select pg_current_xact_id()")  # a forgotten session, open with a transaction id
    try:
        with psycopg.connect(outbox.settings.warehouse_dsn, autocommit=True) as conn:
            outbox.insert(conn, 3)
        (seen,) = publisher_snapshot(outbox.settings, [outbox.publisher])
        assert seen.error is None and seen.health.unseen is None, seen
        assert (seen.health.held, seen.health.position) == (3, None)
        assert any(f"pid {blocker.info.backend_pid} " in b for b in seen.health.blockers)
    finally:
        blocker.rollback()
        blocker.close()
    assert outbox.publish().rows == 3
    (seen,) = publisher_snapshot(outbox.settings, [outbox.publisher])
    assert seen.health.held == 0 and seen.health.position.endswith("/3")


def test_the_view_answers_for_a_publisher_that_never_ran(case):
    """Its offsets topic does not exist yet: the view read it for 30 s and showed a read-back error."""
    from eosflow.observe.state import publisher_snapshot

    outbox = Outbox(case)
    (seen,) = publisher_snapshot(outbox.settings, [outbox.publisher])
    assert seen.error is None, seen.error
    assert (seen.health.held, seen.health.position, seen.health.judged) == (0, None, True)
