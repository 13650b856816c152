"""The consumer's three delivery modes (DESIGN.md "Delivery modes"), on the real stack.

Without faults all three deliver every record once. What the split modes do under real faults
(killed between their two transactions, Postgres restarted, a zombie) is the delivery lab's job:
tests/lab/test_lab_small.py runs it.
"""

from __future__ import annotations

import pytest

from eosflow.ledger import positions
from eosflow.pipelines import PipelineConfigError


def _visible_ids(manifest) -> list[str]:
    return sorted(row.event_id for row in manifest.visible())


@pytest.mark.parametrize("mode", ["at_least_once", "at_most_once"])
def test_without_faults_the_split_modes_deliver_every_record_once(case, mode):
    case.write_config(delivery=mode)
    manifest = case.produce(600, seed=301, transactional_id=f"{case.name}-tx", txn_size=50, abort_ratio=0.2)
    summary = case.ingest(run_id="r1")
    assert summary.outcome == positions.COMMITTED
    assert sorted(case.event_ids()) == _visible_ids(manifest)
    assert case.violations() == []
    assert case.ingest(run_id="r1").outcome == positions.ALREADY_COMMITTED
    assert len(case.event_ids()) == len(manifest.visible())


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
