"""Which plans run without Spark, and how an inline job hands back what its tasks yield."""

from __future__ import annotations

import pyarrow as pa

from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
from eosflow.sources.kafka.inline import InlineJob, reads_inline


def _plan(*spans: tuple[int, int]) -> Plan:
    parts = tuple(
        PartitionPlan(OffsetRange("t", p, a, b), first_seen=False) for p, (a, b) in enumerate(spans)
    )
    return Plan("b1", "p", "r1", parts)


def test_a_plan_runs_inline_up_to_the_offsets_it_spans_markers_included():
    assert reads_inline(_plan((0, 60), (100, 140)), 100)  # 60 + 40 offsets
    assert not reads_inline(_plan((0, 60), (100, 141)), 100)
    assert reads_inline(_plan((5, 5), (7, 7)), 0)  # nothing to read: nothing to start Spark for
    assert not reads_inline(_plan((0, 1)), 0)  # 0: every plan with a record through Spark


def test_an_inline_job_collects_every_tasks_rows_in_order_as_named_rows():
    def batch(topic: str, n: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array([topic] * n), pa.array(list(range(n)), pa.int64())], names=["kafka_topic", "n"]
        )

    empty = pa.RecordBatch.from_arrays(
        [pa.array([], pa.string()), pa.array([], pa.int64())], ["kafka_topic", "n"]
    )
    tasks = [iter([batch("a", 2), empty]), iter([]), iter([batch("b", 1)])]
    rows = InlineJob(lambda: iter(tasks)).collect()
    assert [(r.kafka_topic, r.n) for r in rows] == [("a", 0), ("a", 1), ("b", 0)]


def test_an_inline_job_runs_nothing_until_collected():
    ran = []

    def tasks():
        ran.append(True)
        return iter([])

    job = InlineJob(tasks)
    assert ran == []
    assert job.collect() == [] and ran == [True]
