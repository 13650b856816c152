"""Step 2: read exactly the planned ranges with Spark's Kafka batch source, read_committed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from eosflow.ingest.ranges import Plan


class ReadDataLossError(RuntimeError):
    """Kafka deleted records of the planned ranges while the batch was being read."""


class ReadOutsidePlanError(RuntimeError):
    """Spark returned records outside the planned ranges: never commit such a batch."""


def read_plan(spark, bootstrap: str, plan: Plan):
    starting, ending = plan.spark_offsets()
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", _assign(plan))
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
        # Records deleted under us must fail the read, never be skipped silently.
        .option("failOnDataLoss", "true")
        .load()
    )


@contextmanager
def data_loss_as_error(plan: Plan) -> Iterator[None]:
    """Turn Spark's "records were lost" failure of the planned ranges into a ReadDataLossError."""
    from py4j.protocol import Py4JJavaError

    try:
        yield
    except Py4JJavaError as exc:
        if "KafkaIllegalStateException" not in str(exc) and "may have been lost" not in str(exc):
            raise
        reason = next(
            (line.strip() for line in str(exc).splitlines() if "Could not read records" in line), ""
        )
        raise ReadDataLossError(
            f"batch {plan.batch_id}: Kafka deleted records of the planned ranges before they were read "
            f"({reason or 'see the Spark error'}). Nothing was committed. This plan can never be read again: "
            "start a new run (new run id); its plan will name the lost range, and --acknowledge-data-loss "
            "records it in the ledger if the loss is accepted."
        ) from None


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


def _assign(plan: Plan) -> str:
    import json

    topics: dict[str, list[int]] = {}
    for r in plan.nonempty:
        topics.setdefault(r.topic, []).append(r.partition)
    return json.dumps(topics, sort_keys=True)
