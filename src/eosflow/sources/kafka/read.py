"""Step 2, the driver's side: the planned ranges become one Spark job with a task per range, and what
the tasks read is checked against the plan.

Each task reads its range itself with librdkafka (eosflow.sources.kafka.range_read) and hands the
records, as Arrow batches, to the function the sink runs there: the records go through one Python
process once, never through the JVM or the driver. Spark still schedules the ranges as tasks, runs
them on its executors (a cluster spreads them), and retries a failed task, which reads its range again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from eosflow.kafka_client import KafkaConfig, client_config
from eosflow.ledger.ranges import Plan
from eosflow.sources.kafka.range_read import RangeToRead, read_range


class ReadOutsidePlanError(RuntimeError):
    """A task returned records outside the planned ranges: never commit such a batch."""


class PlannedRead:
    """The planned ranges as one Spark job's tasks: a task per range, which reads its range itself
    (eosflow.sources.kafka.range_read) and hands the records to the sink's function as Arrow batches."""

    def __init__(self, spark, kafka: str | KafkaConfig, plan: Plan, stall_s: float = 120.0) -> None:
        self.spark = spark
        self.kafka = client_config(kafka)
        self.ranges = tuple(
            RangeToRead(r.topic, r.partition, r.start, r.end, plan.batch_id) for r in plan.nonempty
        )
        self.stall_s = stall_s

    def map(self, fn: Callable[[Iterator], Iterator], ddl: str):
        """The DataFrame of what `fn` yields over each range's records (lazy, as mapInArrow is)."""
        kafka, ranges, stall_s = self.kafka, self.ranges, self.stall_s

        def task(ids):
            for batch in ids:
                for i in batch.column("id").to_pylist():
                    yield from fn(read_range(kafka, ranges[i], stall_s=stall_s))

        # One partition per range: a range is read by exactly one task, and a retried task reads it again.
        n = len(ranges)
        return self.spark.range(0, n, 1, max(n, 1)).mapInArrow(task, ddl)


def check_within_plan(
    plan: Plan, stats: dict[tuple[str, int], tuple[int, int, int]]
) -> dict[tuple[str, int], int]:
    """Records read per planned partition; raises if anything lies outside the plan."""
    planned = {(r.topic, r.partition): r for r in plan.nonempty}
    outside = []
    for key, (n, lo, hi) in stats.items():
        r = planned.get(key)
        if r is None or lo < r.start or hi >= r.end or n > r.span:
            outside.append(f"{key[0]}[{key[1]}]: {n} records, offsets {lo}..{hi}, planned {r or 'nothing'}")
    if outside:
        raise ReadOutsidePlanError(f"batch {plan.batch_id}: read outside the plan: {'; '.join(outside)}")
    return {key: stats.get(key, (0, 0, 0))[0] for key in ((r.topic, r.partition) for r in plan.ranges)}
