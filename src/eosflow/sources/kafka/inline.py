"""Step 2 without Spark: a small plan's ranges read, checked and written in the run's own process.

A Spark job pays for a JVM (3-6 s to start on two cores) and a Python worker (1-3 s before its first
task) ahead of the first record: for a plan of a few thousand records that is nearly the whole run,
and a stream's micro-batch pays the worker's part every time. A plan spanning at most
`Settings.inline_max_offsets` offsets therefore runs here: the same sink function over the same
range reads (eosflow.sources.kafka.range_read), one range after the other, in the driver's process.
Nothing else differs: the tasks' functions, their staging, the counts the commit checks, the commit.
What is lost is only what Spark adds to a small batch: spreading it over executors, and retrying a
failed task (a failed run is run again, as any failed run).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterator
from typing import Any

from eosflow.kafka_client import KafkaConfig, client_config
from eosflow.ledger.ranges import Plan
from eosflow.sources.kafka.range_read import RangeToRead, read_range


def reads_inline(plan: Plan, max_offsets: int) -> bool:
    """Whether `plan` is small enough to read without Spark: the offsets it spans (records, and
    the transaction markers between them) at most `max_offsets`."""
    return sum(r.span for r in plan.nonempty) <= max_offsets


class InlineRead:
    """A RecordSource (eosflow.transform) reading the planned ranges in this process, in plan order."""

    def __init__(self, kafka: str | KafkaConfig, plan: Plan, stall_s: float = 120.0) -> None:
        self.kafka = client_config(kafka)
        self.ranges = tuple(
            RangeToRead(r.topic, r.partition, r.start, r.end, plan.batch_id) for r in plan.nonempty
        )
        self.stall_s = stall_s

    def map(self, fn: Callable[[Iterator[Any]], Iterator[Any]], ddl: str) -> InlineJob:
        """What `fn` yields over each range's records, run when collected (as a Spark job would be).

        `ddl` is the Spark schema of what `fn` yields; here the batches carry their own."""
        kafka, stall_s = self.kafka, self.stall_s
        return InlineJob(lambda: (fn(read_range(kafka, r, stall_s=stall_s)) for r in self.ranges))


class InlineJob:
    """The inline counterpart of the DataFrame a Spark source returns: `collect()` runs it."""

    def __init__(self, tasks: Callable[[], Iterator[Iterator]]) -> None:
        self.tasks = tasks

    def collect(self) -> list[tuple]:
        """Every row the tasks yield, as named tuples (attribute access, as Spark's Row)."""
        rows: list[tuple] = []
        for task in self.tasks():
            for batch in task:
                if batch.num_rows == 0:
                    continue
                # names known only here (mypy wants them written out)
                row = namedtuple("Row", batch.schema.names)  # type: ignore[misc]  # noqa: PYI024
                rows.extend(row(*values) for values in zip(*batch.to_pydict().values(), strict=True))
        return rows
