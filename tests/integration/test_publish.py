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
