"""The randomized schedule test of issue 13, CI-sized: a few minutes of random steps on the main stack.

`make soak` runs the same machine for 1,000+ steps on a stack of its own (tests/random/soak.py).
EOSFLOW_RANDOM_SEED=<n> replays a seed; EOSFLOW_RANDOM_EXAMPLES / EOSFLOW_RANDOM_STEPS size the run.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


def test_random_schedule_keeps_the_warehouse_equal_to_the_producers_model(schedule_machine):
    """8 pipelines x 40 random steps, each step a real produce, ingest, kill or backfill checked against the
    model: 2 to 5 minutes, the price of finding schedules nobody wrote down (a failing seed is printed)."""
    chosen = int(os.environ.get("EOSFLOW_RANDOM_SEED") or random.SystemRandom().randrange(2**32))
    print(f"randomized schedule: seed {chosen} (EOSFLOW_RANDOM_SEED={chosen} replays it)")
    schedule_machine.heavy_gap = 3
    schedule_machine.trace = bool(os.environ.get("EOSFLOW_RANDOM_TRACE"))
    machine = seed(chosen)(schedule_machine)
    started = time.monotonic()
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=int(os.environ.get("EOSFLOW_RANDOM_EXAMPLES", "8")),
                stateful_step_count=int(os.environ.get("EOSFLOW_RANDOM_STEPS", "40")),
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                print_blob=True,
            ),
        )
    finally:
        stats = schedule_machine.stats
        print(
            f"seed {chosen}: {stats.machines} machine(s), {stats.total_steps} steps in "
            f"{time.monotonic() - started:.0f} s; steps {dict(stats.steps)}; faults {dict(stats.faults)}; "
            f"outcomes {dict(stats.outcomes)}; seconds { ({k: round(v) for k, v in stats.seconds.items()}) }"
        )
        for v in stats.violations[:5]:
            print("VIOLATION", v)
