"""The DAGs' verify task: dbt on a real ingest; a broken invariant fails it with where and what."""

from __future__ import annotations

import psycopg
import pytest

pytestmark = pytest.mark.integration


def _shift_position(case, by: int) -> None:
    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        conn.execute(
            "update eosflow.positions set next_offset = next_offset + %s "
            "where pipeline = %s and partition = 1",
            (by, case.name),
        )


def test_verify_task_passes_clean_data_and_names_a_broken_invariant(case, airflow_db):
    from airflow.sdk.exceptions import AirflowFailException

    from eosflow_airflow.operators.tasks import verify

    case.produce(300, seed=601, partitions=2)
    case.ingest()
    clean = verify.function(case.name)
    assert clean["pipeline"] == case.name and clean["checks"] >= 6  # the six invariants at least
    # The ingest DAG checks the invariants only; the marts are the marts DAG's (test_lineage.py).
    assert case.query("select to_regclass(%s)", f"analytics_{case.name}.order_events") == [(None,)]

    _shift_position(case, 7)  # committed, so dbt (connections of its own) sees it; undone below
    try:
        with pytest.raises(AirflowFailException) as failed:
            verify.function(case.name)
    finally:
        _shift_position(case, -7)
    message = str(failed.value)
    assert "I5 positions_match_ledger" in message and "partition=1" in message
    assert "\n" not in message  # one line on top of the stack trace
