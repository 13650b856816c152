"""Schedules the randomized test once got wrong, replayed step by step against the real stack.

Each is a bug of the model (the test's idea of what the warehouse must hold), found by a random run:
a model that cries wolf hides real violations behind false ones.
"""

from __future__ import annotations

import pytest

from tests.random.machine import ScheduleMachine

pytestmark = pytest.mark.integration


def test_a_run_killed_after_its_acknowledged_commit_settles_the_loss_before_any_retry(bind_machine):
    # Found by seed 3340703636 (fresh-clone CI, 2026-11-23): an ingest acknowledging a loss was killed
    # right after its commit; the next scheduled run, before any retry, was flagged for committing
    # "without acknowledging" a loss the killed run had already recorded.
    m = bind_machine(ScheduleMachine)()
    m.create_topic(partitions=1)
    m.produce(batches=[{"n": 10, "partitions": [0], "fate": "commit", "poison": []}])
    m.ingest(max_records=4, acknowledge=False)  # the history begins; offsets past 4 unread
    m.produce(batches=[{"n": 10, "partitions": [0], "fate": "commit", "poison": []}])
    m.retention(partition=0, share=0.6)  # committed records deleted before they were read
    assert m.pipe.lost_pending
    m.ingest_crashes(point="after_commit", acknowledge=True)
    m.produce(batches=[{"n": 3, "partitions": [0], "fate": "commit", "poison": []}])
    m.ingest(max_records=None, acknowledge=False)  # must be no Violation
    m.retry_killed()
    m.warehouse_matches_model()
    m.teardown()
