"""The consumer's three delivery modes (DESIGN.md "Delivery modes"), on the real stack.

Without faults all three deliver every record once. What the split modes do under real faults
(killed between their two transactions, Postgres restarted, a zombie) is the delivery lab's job:
tests/lab/test_lab_small.py runs it.
"""

from __future__ import annotations

import pytest

from eosflow.ledger import positions
from eosflow.pipelines import PipelineConfigError

pytestmark = pytest.mark.integration


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


def test_at_most_once_output_survives_another_runs_sweep_between_its_two_transactions(case, tmp_path):
    """The positions commit first and mark the plan committed; until the second transaction publishes the
    output, its staging must not look like a committed batch's leftovers to another run's sweep (found by
    the suite: a run of another pipeline swept it in that gap, and the batch's output was lost)."""
    import subprocess
    import sys
    import time

    import psycopg

    from eosflow.sinks.postgres.target import sweep_staging

    case.write_config(delivery="at_most_once")
    manifest = case.produce(200, seed=307)
    env = case.env(EOSFLOW_PAUSE_AT="in_commit", EOSFLOW_FAULT_DIR=str(tmp_path))
    cmd = [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", case.name, "--run-id", "r1"]
    run = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (tmp_path / "in_commit.paused").exists():
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.1)
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        swept = sweep_staging(conn)  # what any other run's prepare step does
    (tmp_path / "in_commit.resume").write_text("go")
    out, err = run.communicate(timeout=240)

    assert run.returncode == 0, err[-3000:]
    assert sorted(case.event_ids()) == _visible_ids(manifest), err[-3000:]
    assert f"{case.name}:r1" not in swept
    assert case.violations() == []
