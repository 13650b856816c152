"""What the warehouse's state table does with an unchanged TOAST value (Debezium's placeholder) that none
of the key's earlier changes nor, for a moved key, the old key's holds, against the real broker, Spark and
Postgres (read back with psycopg). docs/DESIGN.md, "Change streams": such a change is not written with a NULL
the source does not hold; in the commit's transaction it leaves the changelog for eosflow.rejected with its
coordinates, its record's bytes and a reason naming REPLICA IDENTITY FULL (its range's written count one
less, its rejected one more), as the Kafka and Iceberg sinks reject it, and the state row stays as it was.
A later change that would fill from a rejected one is rejected too. Under every delivery mode, and a replay.
"""

from __future__ import annotations

import json

import pytest

from eosflow.schema.changes import OLD_KEY_HEADER, PLACEHOLDER
from eosflow.verify import verify_pipeline
from tests.integration.test_change_streams import Source, as_change_stream, state_of

pytestmark = pytest.mark.integration
FULL = "Set REPLICA IDENTITY FULL on the source table so Debezium sends them"


def _rejected(case) -> list[tuple]:
    """(partition, offset, raw key, the raw value's op and id, error) of the pipeline's rejected rows."""
    rows = case.query(
        "select kafka_partition, kafka_offset, raw_key, raw_value, error from eosflow.rejected "
        "where pipeline = %s order by 1, 2",
        case.name,
    )
    return [(p, o, bytes(k), _op_and_id(bytes(v)), e) for p, o, k, v, e in rows]


def _op_and_id(value: bytes) -> tuple[str, int]:
    change = json.loads(value)
    return change["op"], change["after"]["id"]


def _ledger(case) -> list[tuple[int, int, int, str]]:
    """(records read, rows written, rows rejected, kind) of each committed range with records."""
    return case.query(
        "select records_read, rows_written, rows_rejected, kind from eosflow.ledger where pipeline = %s "
        "and end_offset > start_offset order by committed_at, partition, start_offset",
        case.name,
    )


def _verified(case) -> None:
    result = verify_pipeline(case.settings, case.name)
    assert not result.failed, result.table()


def _moved(src: Source, new: int, old: int, email: str, lsn: int) -> None:
    """The create half of a primary-key update (old -> new), its TOAST column left out, at `lsn`."""
    value = {"op": "c", "before": None, "after": {"id": new, "email": email, "balance": None,
             "notes": PLACEHOLDER}, "source": {"lsn": lsn, "ts_ms": 1}}  # fmt: skip
    key, header = json.dumps({"id": new}).encode(), json.dumps({"id": old}).encode()
    src.producer.produce(src.case.topic, key=key, value=json.dumps(value).encode(),
                         partition=new % src.partitions, headers=[(OLD_KEY_HEADER, header)])  # fmt: skip


def _never_seen(src: Source) -> None:
    """Key 5's updates leave notes out, and the changelog never saw its create (retention removed it, or
    the pipeline reads from the topic's latest); key 7's update fills from its create."""
    src.send("u", {"id": 5, "email": "e@x", "balance": None, "notes": PLACEHOLDER})  # offset 0
    src.send("c", {"id": 7, "email": "g@x", "balance": None, "notes": "seven"})  # 1
    src.send("u", {"id": 5, "email": "e2@x", "balance": "1.00", "notes": PLACEHOLDER})  # 2: from 0, rejected
    src.send("u", {"id": 7, "email": "g2@x", "balance": None, "notes": PLACEHOLDER})  # 3: from 1
    src.flush()


# at_least_once: the same changes are test_at_least_once_killed_in_its_commit_rejects_..._once below
@pytest.mark.parametrize("delivery", ["exactly_once", "at_most_once"])
def test_an_update_of_a_key_the_changelog_never_saw_is_rejected_not_given_a_null(case, delivery):
    """About 20 s a mode (two runs, two verifies). Key 5's two updates are rejected (the second would take
    the first's values) with their record's bytes and the reason, out of the changelog and counted as
    rejected; key 7 is filled; key 5's full update later applies, and the update after it fills from it."""
    state = as_change_stream(case, delivery=delivery)
    src = Source(case, partitions=1)
    _never_seen(src)
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {7: ("g2@x", None, "seven")}
    assert case.query(f"select count(*) from {case.table} where id = 5") == [(0,)]
    rejected = _rejected(case)
    assert [r[:4] for r in rejected] == [(0, 0, b'{"id": 5}', ("u", 5)), (0, 2, b'{"id": 5}', ("u", 5))]
    assert all(FULL in r[4] and "['notes']" in r[4] for r in rejected), rejected
    assert "no earlier row of the key" in rejected[0][4]
    assert f"{case.topic}[0]@0, was rejected" in rejected[1][4]
    assert _ledger(case) == [(4, 2, 2, "data")]
    _verified(case)

    src.send("u", {"id": 5, "email": "e3@x", "balance": None, "notes": "five"})  # the whole row
    src.send("u", {"id": 5, "email": "e4@x", "balance": None, "notes": PLACEHOLDER})  # from the line above
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {5: ("e4@x", None, "five"), 7: ("g2@x", None, "seven")}
    assert _ledger(case)[1:] == [(2, 2, 0, "data")]
    _verified(case)


def test_a_replay_rejects_the_changes_nothing_fills_again_and_counts_them(case):
    """About 9 s. A replay of the range holding two rejected changes rejects them again: one rejected
    row each, the replay's ledger row counting them, the state as it was, verify passing."""
    from eosflow.ledger.backfill import BackfillRequest
    from eosflow.runners import backfill_run

    state = as_change_stream(case)
    src = Source(case, partitions=1)
    _never_seen(src)
    assert case.ingest().outcome == "committed"
    case.write_config(transform_version="v2")
    request = BackfillRequest(case.name, "replay", (0,), 0, 4, chunk_size=100)
    done = backfill_run.run(case.settings, request, "replay-1", backfill_run.resolve(case.settings, request),
                            log=lambda m: None)  # fmt: skip
    assert [s.outcome for s in done] == ["committed"]
    assert state_of(case, state) == {7: ("g2@x", None, "seven")}
    assert [r[:2] for r in _rejected(case)] == [(0, 0), (0, 2)]
    assert case.query(f"select kafka_offset, transform_version from {case.table} order by 1") == [
        (1, "v2"),
        (3, "v2"),
    ]
    assert _ledger(case) == [(4, 2, 2, "data"), (4, 2, 2, "replay")]
    _verified(case)


def test_a_moved_key_takes_the_old_keys_value_not_the_new_keys_former_rows(case):
    """About 2 s. Key 2 was deleted, then key 1 moved to 2: the row is key 1's, notes and all, though key
    2's former create is later in the changelog than key 1's."""
    state = as_change_stream(case)
    src = Source(case, partitions=1)
    src.send("c", {"id": 1, "email": "a@x", "balance": None, "notes": "one"})
    src.send("c", {"id": 2, "email": "b@x", "balance": None, "notes": "two"})
    src.send("d", {"id": 2, "email": None, "balance": None, "notes": None})
    at = src.send("d", {"id": 1, "email": None, "balance": None, "notes": None})
    _moved(src, 2, 1, "a@x", at)
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {2: ("a@x", None, "one")}


def test_a_key_moved_from_a_partition_that_is_behind_is_rejected_not_given_a_stale_value(case):
    """About 9 s. Key 1 (partition 1) is updated, then moved to 2 (partition 0); partition 0's create is
    read while partition 1's update and delete are not yet (Connect's producer sends each partition on
    its own; a catch-up caps each range on its own). The create is rejected, not filled from key 1's
    older row, and stays rejected once partition 1 catches up."""
    state = as_change_stream(case)
    src = Source(case, partitions=2)
    src.send("c", {"id": 1, "email": "a@x", "balance": None, "notes": "one"})
    src.flush()
    assert case.ingest().outcome == "committed"
    _moved(src, 2, 1, "a@x", src.lsn + 20)
    src.flush()
    assert case.ingest().outcome == "committed"
    src.send("u", {"id": 1, "email": "a@x", "balance": None, "notes": "newer"})
    src.send("d", {"id": 1, "email": None, "balance": None, "notes": None})  # the move's first half
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {}  # key 1 moved away, key 2's create rejected
    ((partition, offset, key, op_id, error),) = _rejected(case)
    assert (partition, offset, key, op_id) == (0, 0, b'{"id": 2}', ("c", 2))
    assert 'moved from key {"id": 1}' in error and "has not delivered the move's delete" in error
    assert FULL in error
    assert [row[:3] for row in _ledger(case)] == [(1, 1, 0), (1, 0, 1), (3, 3, 0)]
    _verified(case)


def test_a_move_whose_old_row_the_changelog_lacks_and_an_update_after_a_truncate_are_rejected(case):
    """About 11 s. Key 1's update was rejected (never seen), so when key 1 moves to 2 in the next run its
    row as it moved is not in the changelog; key 3's update after a truncate has no create since. Both are
    rejected with their reason; the truncate still empties the state."""
    state = as_change_stream(case)
    src = Source(case, partitions=1)
    src.send("u", {"id": 1, "email": "a@x", "balance": None, "notes": PLACEHOLDER})  # 0: rejected
    src.send("c", {"id": 3, "email": "c@x", "balance": None, "notes": "three"})  # 1
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {3: ("c@x", None, "three")}
    at = src.send("d", {"id": 1, "email": None, "balance": None, "notes": None})  # 2, its tombstone 3
    _moved(src, 2, 1, "a@x", at)  # 4
    src.truncate()  # 5
    src.send("u", {"id": 3, "email": "c2@x", "balance": None, "notes": PLACEHOLDER})  # 6
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {}
    rejected = {offset: error for _, offset, _, _, error in _rejected(case)}
    assert sorted(rejected) == [0, 4, 6]
    assert 'moved from key {"id": 1}, whose row as it moved is not in the changelog' in rejected[4]
    assert "a truncate emptied the table" in rejected[6] and FULL in rejected[6]
    assert [row[:3] for row in _ledger(case)] == [(2, 1, 1), (5, 3, 2)]
    _verified(case)


def test_at_least_once_killed_in_its_commit_rejects_the_redelivered_change_once(case):
    """About 5 s. The run is killed between at_least_once's output transaction (the rejection in it) and
    its positions; the retry re-delivers the range: the changes are rejected again, one rejected row each,
    the range counted once as read = written + rejected, the state the source's."""
    state = as_change_stream(case, delivery="at_least_once")
    src = Source(case, partitions=1)
    _never_seen(src)
    killed = case.ingest_process("--run-id", "r1", EOSFLOW_CRASH_AT="in_commit")
    assert killed.returncode == -9 and "SIGKILL at in_commit" in killed.stderr, killed.stderr[-2000:]
    assert [r[:2] for r in _rejected(case)] == [(0, 0), (0, 2)]  # the output's transaction committed
    assert case.ingest(run_id="r1").outcome == "committed"  # the orchestrator's retry
    assert state_of(case, state) == {7: ("g2@x", None, "seven")}
    assert [r[:2] for r in _rejected(case)] == [(0, 0), (0, 2)]
    assert case.query(f"select kafka_offset, count(*) from {case.table} group by 1 order by 1") == [
        (1, 2),
        (3, 2),
    ]
    assert _ledger(case) == [(4, 2, 2, "data")]
