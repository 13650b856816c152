"""Which scenarios run under which modes, how many times, and in what order.

A scenario gets all its cells (mode, trial) at once, so one that needs a costly set-up (Airflow,
the proxy, the three-broker cluster) pays for it once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eosflow.pipelines import DELIVERY_MODES
from eosflow_dev.lab import consumer_faults, publisher_faults, stream_faults
from eosflow_dev.lab.outcome import Trial
from eosflow_dev.lab.world import CHANGE_MODES, ICEBERG_MODES, KAFKA_MODES, PUBLISH_MODES, STREAM_MODES, Lab

Cell = tuple[str, int]  # (consumer delivery mode, trial number)
Runner = Callable[[Lab, Sequence[Cell]], list[Trial]]
EO = ("exactly_once",)
KAFKA = tuple(KAFKA_MODES)  # a Kafka sink, exactly_once and its at_least_once comparison
ICEBERG = tuple(ICEBERG_MODES)  # an Iceberg sink, exactly_once
PUBLISH = tuple(PUBLISH_MODES)  # eosflow publish, exactly_once and its at_least_once comparison
STREAM = tuple(STREAM_MODES)  # eosflow stream
CHANGES = tuple(CHANGE_MODES)  # a Debezium change stream into the warehouse, in each delivery mode
CHANGE_CRASH_POINTS = ("after_stage", "in_commit")  # the commit's two sides: nothing in, or the split


@dataclass(frozen=True)
class Scenario:
    key: str  # what --scenarios names
    run: Runner
    modes: tuple[str, ...] = DELIVERY_MODES  # the consumer modes a full lab compares
    small_modes: tuple[str, ...] = ()  # what the CI-sized lab runs (none: the full lab only)


def _crash_at(point: str) -> Runner:
    return lambda lab, cells: [consumer_faults.crash(lab, point, mode, trial) for mode, trial in cells]


def _each(fn: Callable[[Lab, str, int], Trial]) -> Runner:
    return lambda lab, cells: [fn(lab, mode, trial) for mode, trial in cells]


def _airflow(lab: Lab, cells: Sequence[Cell]) -> list[Trial]:
    from eosflow_dev.lab.airflow_clear import cleared_and_rerun

    return cleared_and_rerun(lab, cells)


def _proxy(lab: Lab, cells: Sequence[Cell]) -> list[Trial]:
    from eosflow_dev.lab.producer_faults import producer_retries

    return producer_retries(lab, cells)


def _acks(lab: Lab, cells: Sequence[Cell]) -> list[Trial]:
    from eosflow_dev.lab.producer_faults import leader_failure

    return leader_failure(lab, cells)


def _publish_kill(point: str) -> Runner:
    return lambda lab, cells: [publisher_faults.kill(lab, point, mode, trial) for mode, trial in cells]


def _publish(fn: Callable[[Lab, str, int], Trial]) -> Runner:
    return _each(fn)


def _crash_modes(point: str) -> tuple[str, ...]:
    warehouse = DELIVERY_MODES + ICEBERG if point in consumer_faults.CRASH_POINTS else ()
    kafka = KAFKA if point in consumer_faults.KAFKA_CRASH_POINTS else ()
    return warehouse + kafka + (CHANGES if point in CHANGE_CRASH_POINTS else ())


def _crash_small_modes(point: str) -> tuple[str, ...]:
    if point == "in_commit":  # where the three semantics differ; Iceberg: in the table, the ledger not told
        # changes: what the two comparison modes do to a replica (exactly_once's change path is killed at
        # every fault point by the randomized change-stream schedule, and by the full lab)
        return (*DELIVERY_MODES, "iceberg_exactly_once", "changes_at_least_once", "changes_at_most_once")
    return ("kafka_exactly_once", "kafka_at_least_once") if point == "in_kafka_transaction" else ()


SCENARIOS: tuple[Scenario, ...] = (
    *(
        Scenario(
            f"kill-{point.replace('_', '-')}",
            _crash_at(point),
            _crash_modes(point),
            _crash_small_modes(point),
        )
        for point in dict.fromkeys(consumer_faults.CRASH_POINTS + consumer_faults.KAFKA_CRASH_POINTS)
    ),
    Scenario(
        "broker-restart", _each(consumer_faults.broker_restart_mid_read), DELIVERY_MODES + KAFKA + ICEBERG
    ),
    Scenario(
        "postgres-restart",
        _each(consumer_faults.postgres_restart_mid_commit),
        DELIVERY_MODES + KAFKA + ICEBERG + CHANGES,  # Iceberg: the catalog's Postgres, after its commit
        small_modes=EO,
    ),
    Scenario(
        "zombie",
        _each(consumer_faults.zombie),
        DELIVERY_MODES + KAFKA + ICEBERG + CHANGES,
        small_modes=("at_least_once",),  # the comparison that duplicates; exactly_once is fenced (its tests)
    ),
    Scenario("airflow-clear", _airflow, DELIVERY_MODES + KAFKA),
    # A warm Spark: the Spark Connect server the job's Spark work runs on, killed mid-run (full lab only:
    # the randomized batch schedule draws the same fault in CI, and tests/integration/test_spark_connect.py).
    Scenario("spark-connect-kill", _each(consumer_faults.spark_connect_kill), EO),
    # `eosflow publish`: an outbox into Kafka, against its at-least-once comparison.
    *(
        Scenario(
            f"publish-kill-{point.removeprefix('publish_').replace('_', '-')}",
            _publish_kill(point),
            PUBLISH,
            PUBLISH if point == "publish_in_transaction" else (),
        )
        for point in ("publish_before_batch", "publish_in_transaction", "publish_after_commit")
    ),
    Scenario("publish-zombie", _publish(publisher_faults.zombie), PUBLISH),
    Scenario("publish-broker-restart", _publish(publisher_faults.broker_restart), PUBLISH, ()),
    Scenario("publish-postgres-restart", _publish(publisher_faults.postgres_restart), PUBLISH, ()),
    # `eosflow stream`: kill -9 at each step boundary (restarted as its supervisor would), a replay
    # racing it, its broker and its Postgres restarting under it.
    *(
        Scenario(
            f"stream-kill-{point.replace('_', '-')}",
            lambda lab, cells, point=point: [stream_faults.kill(lab, point, m, t) for m, t in cells],
            STREAM,
        )
        for point in ("after_plan", "after_stage", "in_commit", "after_commit")
    ),
    Scenario("stream-replay-race", _each(stream_faults.replay_race), STREAM, STREAM),
    Scenario("stream-broker-restart", _each(stream_faults.broker_restart), STREAM, ()),
    Scenario("stream-postgres-restart", _each(stream_faults.postgres_restart), STREAM, ()),
    # The producer's faults: the consumer is exactly_once, so whatever is lost or duplicated
    # happened between the producer and the broker.
    Scenario("producer-retries", _proxy, modes=EO, small_modes=EO),
    Scenario("leader-failure", _acks, modes=EO, small_modes=EO),
)
# The CI-sized lab (`--small`, 17 trials) keeps what only the lab shows: the three semantics where they
# differ (kill -9 in the commit, for appended records and for a change stream's replica; Postgres restarted
# mid-commit; a zombie, where at-least-once duplicates), the producer's faults, and one trial of each
# other runner and sink so the lab's own code for each stays tested. The other boundaries, restarts,
# zombies and the Airflow clear are the full lab's (`make lab`), and each is attacked by an integration
# test or the randomized schedule too.


def by_key() -> dict[str, Scenario]:
    return {s.key: s for s in SCENARIOS}


def plan(
    keys: Sequence[str] | None, modes: Sequence[str] | None, trials: int, small: bool
) -> list[tuple[Scenario, list[Cell]]]:
    """The scenarios to run, each with its (mode, trial) cells."""
    chosen = [by_key()[k] for k in keys] if keys else list(SCENARIOS)
    out = []
    for scenario in chosen:
        wanted = scenario.modes
        if small:  # a scenario named with --small runs at least its first mode
            wanted = scenario.small_modes or (scenario.modes[:1] if keys else ())
        if modes:
            wanted = tuple(m for m in wanted if m in modes)
        cells = [(mode, trial) for trial in range(1, trials + 1) for mode in wanted]
        if cells:
            out.append((scenario, cells))
    return out


def run(lab: Lab, todo: Sequence[tuple[Scenario, list[Cell]]]) -> tuple[list[Trial], list[str]]:
    """Every scenario in turn; one that breaks is reported, and the others still run."""
    trials: list[Trial] = []
    errors: list[str] = []
    for scenario, cells in todo:
        modes = ", ".join(sorted({m for m, _ in cells}))
        lab.log(f"scenario {scenario.key}: {len(cells)} trial(s) ({modes})")
        try:
            trials += _observed(lab, scenario, scenario.run(lab, cells))
        except Exception as exc:  # noqa: BLE001 - the report must still show what did run
            errors.append(f"{scenario.key}: {type(exc).__name__}: {exc}")
            lab.log(f"scenario {scenario.key} FAILED: {type(exc).__name__}: {exc}")
    return trials, errors


def _observed(lab: Lab, scenario: Scenario, found: list[Trial]) -> list[Trial]:
    """The trials, each cell whose fault was not observed run once more: such a trial proves nothing (a
    CI run's toxiproxy window closed before its request timed out), and its second run is what the report
    shows. A cell still without its fault stays, and the lab fails for it."""
    unseen = sorted({(t.mode, t.trial) for t in found if t.faults == 0})
    if not unseen:
        return found
    lab.log(f"scenario {scenario.key}: no fault observed in {unseen}; running those once more")
    return [t for t in found if (t.mode, t.trial) not in unseen] + scenario.run(lab, unseen)
