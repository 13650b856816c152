"""The consumer's three delivery modes (DESIGN.md "Delivery modes"), on the real stack.

Without faults all three deliver every record once. Killed between the two transactions of a split
commit, at_least_once re-delivers the batch and at_most_once loses it; the invariants notice both.
"""

from __future__ import annotations

from collections import Counter

import pytest

from eosflow.ingest import commit
from eosflow.ingest.pipelines import PipelineConfigError


def _visible_ids(manifest) -> list[str]:
    return sorted(row.event_id for row in manifest.visible())


@pytest.mark.parametrize("mode", ["at_least_once", "at_most_once"])
def test_without_faults_the_split_modes_deliver_every_record_once(case, mode):
    case.write_config(delivery=mode)
    manifest = case.produce(600, seed=301, transactional_id=f"{case.name}-tx", txn_size=50, abort_ratio=0.2)
    summary = case.ingest(run_id="r1")
    assert summary.outcome == commit.COMMITTED
    assert sorted(case.event_ids()) == _visible_ids(manifest)
    assert case.violations() == []
    assert case.ingest(run_id="r1").outcome == commit.ALREADY_COMMITTED
    assert len(case.event_ids()) == len(manifest.visible())


def test_at_least_once_killed_between_its_transactions_duplicates_the_batch(case):
    case.write_config(delivery="at_least_once")
    manifest = case.produce(500, seed=302, transactional_id=f"{case.name}-tx", txn_size=50)
    crashed = case.ingest_process("--run-id", "r1", EOSFLOW_CRASH_AT="in_commit")
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    assert sorted(case.event_ids()) == _visible_ids(manifest)  # the output committed before the kill

    retry = case.ingest(run_id="r1")  # the orchestrator's retry: same plan, positions never moved
    assert retry.outcome == commit.COMMITTED
    copies = Counter(case.event_ids())
    assert set(copies) == set(_visible_ids(manifest)) and set(copies.values()) == {2}
    broken = {v.invariant.split()[0] for v in case.violations()}
    assert "I1" in broken, broken


def test_at_most_once_killed_between_its_transactions_loses_the_batch(case):
    case.write_config(delivery="at_most_once")
    manifest = case.produce(500, seed=303, transactional_id=f"{case.name}-tx", txn_size=50)
    crashed = case.ingest_process("--run-id", "r1", EOSFLOW_CRASH_AT="in_commit")
    assert crashed.returncode == -9, crashed.stderr[-2000:]

    retry = case.ingest(run_id="r1")
    assert retry.outcome == commit.ALREADY_COMMITTED  # the positions say it is done
    assert case.event_ids() == []
    assert sum(row[4] for row in case.ledger()) == len(manifest.visible())  # the ledger claims them all
    broken = {v.invariant.split()[0] for v in case.violations()}
    assert "I4" in broken, broken


def test_exactly_once_killed_inside_its_transaction_is_retried_cleanly(case):
    manifest = case.produce(500, seed=304, transactional_id=f"{case.name}-tx", txn_size=50)
    crashed = case.ingest_process("--run-id", "r1", EOSFLOW_CRASH_AT="in_commit")
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    assert case.event_ids() == []
    assert case.ingest(run_id="r1").outcome == commit.COMMITTED
    assert sorted(case.event_ids()) == _visible_ids(manifest)
    assert case.violations() == []


def test_a_split_mode_refuses_a_target_with_the_offsets_key(case):
    case.produce(10, seed=305)
    case.ingest(run_id="r1")  # exactly_once made the keyed table
    case.write_config(delivery="at_least_once")
    with pytest.raises(PipelineConfigError, match="needs a target without a unique key"):
        case.ingest(run_id="r2")


def test_an_unknown_delivery_mode_is_a_clear_configuration_error(case):
    case.write_config(delivery="twice")
    with pytest.raises(PipelineConfigError, match="delivery 'twice' unknown; one of"):
        _ = case.pipeline
