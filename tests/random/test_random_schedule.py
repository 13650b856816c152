"""The randomized schedules of issues 13, 27 and 44, CI-sized: a few minutes of random steps per runner on the
main stack.

`make soak` runs the same machines for 1,000+ steps each on a stack of its own (tests/random/soak.py).
EOSFLOW_RANDOM_SEED=<n> replays a seed; EOSFLOW_RANDOM_EXAMPLES / EOSFLOW_RANDOM_STEPS size the runs.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.random.change_stream import ChangeStreamMachine
from tests.random.iceberg_sink import IcebergSinkMachine
from tests.random.kafka_sink import KafkaSinkMachine
from tests.random.machine import ScheduleMachine
from tests.random.publisher import PublisherMachine
from tests.random.stream import StreamMachine

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


def run_machine(machine: type, examples: int, steps: int, heavy_gap: int = 3) -> None:
    """Hypothesis' stateful run of `machine`, its seed printed (a failing one replays), then its figures."""
    chosen = int(os.environ.get("EOSFLOW_RANDOM_SEED") or random.SystemRandom().randrange(2**32))
    print(f"randomized schedule ({machine.runner}): seed {chosen} (EOSFLOW_RANDOM_SEED={chosen} replays it)")
    machine.heavy_gap = heavy_gap
    machine.trace = bool(os.environ.get("EOSFLOW_RANDOM_TRACE"))
    started = time.monotonic()
    try:
        run_state_machine_as_test(
            seed(chosen)(machine),
            settings=settings(
                max_examples=int(os.environ.get("EOSFLOW_RANDOM_EXAMPLES", examples)),
                stateful_step_count=int(os.environ.get("EOSFLOW_RANDOM_STEPS", steps)),
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                print_blob=True,
            ),
        )
    finally:
        stats = machine.stats
        print(
            f"seed {chosen}: {stats.machines} machine(s), {stats.total_steps} steps in "
            f"{time.monotonic() - started:.0f} s; steps {dict(stats.steps)}; faults {dict(stats.faults)}; "
            f"outcomes {dict(stats.outcomes)}; seconds { ({k: round(v) for k, v in stats.seconds.items()}) }"
        )
        for v in stats.violations[:5]:
            print("VIOLATION", v)


def test_random_schedule_keeps_the_warehouse_equal_to_the_producers_model(bind_machine):
    """4 pipelines x 30 random steps, each step a real produce, ingest, kill or backfill checked against the
    model: 1 to 2 minutes, the price of finding schedules nobody wrote down (a failing seed is printed;
    `make soak` takes 1,000 steps)."""
    run_machine(bind_machine(ScheduleMachine), examples=4, steps=30)


def test_random_schedule_keeps_a_kafka_sinks_output_equal_to_the_producers_model(bind_machine):
    """2 pipelines x 30 steps of a `sink: kafka` pipeline (kills inside its Kafka transactions, offsets
    the group forgot, retention, re-created topics) read back read_committed: about a minute, each
    Kafka-sink run being a Spark job that also reads its output back."""
    run_machine(bind_machine(KafkaSinkMachine), examples=2, steps=20)


def test_random_schedule_keeps_a_streams_warehouse_equal_to_the_producers_model(bind_machine):
    """2 pipelines x 20 steps with a stream running, killed, paused and raced by batch runs and backfills:
    each stream start is a Spark session, about a minute."""
    run_machine(bind_machine(StreamMachine), examples=2, steps=20)


def test_random_schedule_keeps_a_publishers_topic_equal_to_the_outbox(bind_machine):
    """2 outboxes x 25 steps: rows of every type committed, rolled back and committed out of order,
    publishers killed, crashed at each point and racing: about a minute."""
    run_machine(bind_machine(PublisherMachine), examples=2, steps=25)


def test_random_schedule_keeps_an_iceberg_tables_rows_equal_to_the_producers_model(bind_machine):
    """2 pipelines x 30 steps of a `sink: iceberg` pipeline (kills before and after its Iceberg commit,
    concurrent runs, retention, re-created topics, compaction) read back by a PyIceberg scan: about a
    minute, each run being a Spark job."""
    run_machine(bind_machine(IcebergSinkMachine), examples=2, steps=20)


class _SharedConnectMachine(ChangeStreamMachine):
    # The suite's Connect worker is shared with the other xdist worker's Debezium tests, which a SIGKILL
    # would fail; the soak (a stack of its own) kills its worker, and test_connect_server kills a private one.
    kills_connect = False


def test_random_schedule_keeps_a_state_table_equal_to_its_source_table(bind_machine):
    """One source table x 10 steps streamed by real Debezium (source transactions, ingests killed at every
    fault point, retries, concurrent runs, replays; the Connect worker SIGKILLed in the soak only) checked at
    quiescent points against the source database itself: under a minute; the soak runs 1,000 steps of it."""
    run_machine(bind_machine(_SharedConnectMachine), examples=1, steps=10)
