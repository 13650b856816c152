"""Step 2: read exactly the planned ranges with Spark's Kafka batch source, read_committed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from eosflow.kafka_client import KafkaConfig, client_config, spark_options
from eosflow.ledger.ranges import Plan


class ReadDataLossError(RuntimeError):
    """Kafka deleted records of the planned ranges while the batch was being read."""


class ReadOutsidePlanError(RuntimeError):
    """Spark returned records outside the planned ranges: never commit such a batch."""


class UnreadableRecordError(RuntimeError):
    """A record Spark's Kafka source cannot read at all: its timestamp overflows Spark's microseconds."""


# Spark keeps instants as microseconds in a long: a Kafka timestamp beyond this many milliseconds
# (a producer writing nanoseconds, on a topic that allows any timestamp) fails Spark's whole read.
_SPARK_MAX_MS = (2**63 - 1) // 1000


def read_plan(spark, kafka: str | KafkaConfig, plan: Plan):
    starting, ending = plan.spark_offsets()
    return (
        spark.read.format("kafka")
        # Each task's consumer otherwise waits out the broker's fetch.max.wait.ms (500 ms) at least once
        # on its range: 1.4 s of a 6-partition, 300-record read on two cores (a stream's whole budget).
        # A range ends at a known offset, so a short wait costs no throughput. The user's config wins.
        .option("kafka.fetch.max.wait.ms", "10")
        .options(**spark_options(kafka))  # the whole client configuration: SASL, TLS, ...
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
def data_loss_as_error(plan: Plan, kafka: str | KafkaConfig | None = None) -> Iterator[None]:
    """Turn Spark's "records were lost" failure of the planned ranges into a ReadDataLossError, and
    its failure on a timestamp it cannot represent into an UnreadableRecordError naming the records."""
    from py4j.protocol import Py4JJavaError

    try:
        yield
    except Py4JJavaError as exc:
        if "long overflow" in str(exc) and "fromJavaTimestamp" in str(exc) and kafka:
            raise _unreadable(plan, kafka) from None
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


def _unreadable(plan: Plan, kafka: str | KafkaConfig) -> UnreadableRecordError:
    """Find, with a plain consumer, the records of the plan whose timestamps Spark cannot hold."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        client_config(
            kafka,
            **{
                "group.id": "eosflow-unreadable-scan",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
        )
    )
    found: list[str] = []
    try:
        for r in plan.nonempty:
            consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
            while len(found) < 5:
                msg = consumer.poll(5.0)
                if msg is None or msg.error() is not None or msg.offset() >= r.end:
                    break
                ms = msg.timestamp()[1]
                if abs(ms) > _SPARK_MAX_MS:
                    found.append(f"{r.topic}[{r.partition}]@{msg.offset()} (timestamp {ms} ms)")
    finally:
        consumer.close()
    where = ", ".join(found) or "a record of the planned ranges (the scan found none)"
    return UnreadableRecordError(
        f"batch {plan.batch_id}: Spark's Kafka source cannot read {where}: its timestamp is beyond what "
        "Spark represents (microseconds in 64 bits; a producer writing nanoseconds?). Nothing was "
        "committed, and no retry can read it. Fix the producer; the topic needs "
        "message.timestamp.after.max.ms at its default (an hour) to refuse such records. eosflow cannot "
        "turn this record into a rejected row yet (docs/DESIGN.md, 'Bad records')."
    )
