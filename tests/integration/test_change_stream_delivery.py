"""A change stream under the comparison delivery modes (docs/DESIGN.md, "Delivery modes"), killed between
their two transactions and retried with the same run id, as an orchestrator retries. The replica is judged
against the source table the changes describe (a model applied to them here), read with psycopg, never
against eosflow's ledger:
- at_least_once re-delivers the range: the changelog holds it twice, and the state is still the source's,
  TOAST fills and a moved key included (a change is not newer than its own copy);
- at_most_once loses the range: every key whose last change was in it is stale, present or absent."""

from __future__ import annotations

from decimal import Decimal

import pytest

from eosflow.schema.changes import PLACEHOLDER
from eosflow.verify import verify_pipeline
from tests.integration.test_change_stream_key_moves import Debezium
from tests.integration.test_change_streams import as_change_stream, state_of

pytestmark = pytest.mark.integration
LONG = "toasted " * 400  # what Debezium sends with the insert only


def _first_run(src: Debezium) -> dict[int, tuple]:
    """Committed normally; returns the source table after it."""
    for i in (1, 2, 3, 4):
        src.insert({"id": i, "email": f"{i}@x", "balance": f"{i}.00", "notes": f"{LONG}{i}"})
    src.flush()
    return {i: (f"{i}@x", Decimal(f"{i}.00"), f"{LONG}{i}") for i in (1, 2, 3, 4)}


def _killed_range(src: Debezium) -> dict[int, tuple]:
    """The range the killed run holds: every key's last change is in it. Returns the source after it."""
    src.update({"id": 1, "email": "1b@x", "balance": "1.50", "notes": PLACEHOLDER})  # filled from run 1
    src.update({"id": 1, "email": "1c@x", "balance": "1.75", "notes": PLACEHOLDER})  # from the line above
    src.move(2, {"id": 20, "email": "2@x", "balance": "2.00", "notes": PLACEHOLDER})  # from the old key
    src.lsn += 10
    src._send("d", {"id": 3, "email": None, "balance": None, "notes": None})
    src.update({"id": 4, "email": "4b@x", "balance": None, "notes": "short"})
    src.insert({"id": 5, "email": "5@x", "balance": None, "notes": None})
    src.flush()
    return {
        1: ("1c@x", Decimal("1.75"), f"{LONG}1"),
        20: ("2@x", Decimal("2.00"), f"{LONG}2"),
        4: ("4b@x", None, "short"),
        5: ("5@x", None, None),
    }


def _killed_then_retried(case) -> tuple[dict[int, tuple], dict[int, tuple]]:
    src = Debezium(case)
    before = _first_run(src)
    assert case.ingest(run_id="r1").outcome == "committed"
    (end_of_run_1,) = case.query(f"select count(*) from {case.table}")[0]
    after = _killed_range(src)
    killed = case.ingest_process("--run-id", "r2", EOSFLOW_CRASH_AT="in_commit")
    assert killed.returncode == -9 and "SIGKILL at in_commit" in killed.stderr, killed.stderr[-2000:]
    case.ingest(run_id="r2")  # the orchestrator's retry: same run id, same plan
    assert end_of_run_1 == 4
    return before, after


def test_at_least_once_killed_in_its_commit_holds_the_range_twice_and_the_replica_equals_the_source(case):
    state = as_change_stream(case, delivery="at_least_once", max_value_bytes=1_000_000)
    _, source = _killed_then_retried(case)
    assert state_of(case, state) == source
    copies = case.query(
        f"select kafka_offset, count(*) from {case.table} where change_op <> '-' group by 1 order by 1"
    )
    assert [n for _, n in copies] == [1] * 4 + [2] * 7, copies  # run 1 once, the killed range twice
    # the re-delivered copies filled their TOASTed columns as the first copies did
    assert case.query(f"select count(*) from {case.table} where change_op in ('c', 'u') and notes is null "
                      "and id <> 5")[0][0] == 0  # fmt: skip
    result = verify_pipeline(case.settings, case.name)
    failed = {c.invariant for c in result.failed}
    assert "I1" in failed and not failed & {"S1", "S2", "S3"}, result.table()


def test_at_most_once_killed_in_its_commit_loses_the_range_and_the_replica_differs_from_the_source(case):
    state = as_change_stream(case, delivery="at_most_once", max_value_bytes=1_000_000)
    before, source = _killed_then_retried(case)
    replica = state_of(case, state)
    assert replica == before  # the range's changes are in neither the changelog nor the state
    differing = {k for k in source.keys() | replica.keys() if source.get(k) != replica.get(k)}
    assert differing == {1, 2, 3, 4, 5, 20}  # stale 1 and 4, present 2 and 3, absent 20 and 5
    assert case.query(f"select count(*) from {case.table}")[0][0] == 4
    result = verify_pipeline(case.settings, case.name)
    failed = {c.invariant for c in result.failed}
    assert "I4" in failed and not failed & {"S1", "S2", "S3"}, result.table()
