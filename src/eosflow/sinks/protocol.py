"""The sink protocol: what runners, `eosflow verify`, the CLI and the Airflow glue ask of a sink.

A sink is where a pipeline's checked records land. What varies between sinks is where the truth of a
commit lives: the warehouse sink commits its rows, rejected rows, ranges and positions in one Postgres
transaction (`truth = "warehouse"`); the Kafka sink commits each range's records and consumed offsets in
one Kafka transaction, and the ledger mirrors it afterwards (eosflow.ledger.mirror). Everything else a
runner does (plan, read, check, fence, time, report) is the same for every sink, so a runner calls the
methods below in this order and never asks which sink it has:

    prepare(conn)              before planning: targets ready, the ledger caught up with the sink
    written = write(run)       the Spark tasks write each planned range (a sink may commit them here)
    commit(conn, run, written) the batch's outcome: committed, already committed, or FencedError

A sink is a frozen dataclass holding its own declaration keys, made by `declare` from a pipeline's
entry in pipelines.yml. Sinks are found by their `sink:` name in the `eosflow.sinks` entry-point group
(eosflow.sinks.registry), so a package of a user's can add one without editing eosflow.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from eosflow.delivery import Delivery

if TYPE_CHECKING:
    import psycopg

    from eosflow.ledger.positions import Key, PartitionCounts
    from eosflow.ledger.ranges import Plan
    from eosflow.schema.declaration import RecordSchema
    from eosflow.settings import Settings
    from eosflow.transform import TransformResult

Log = Callable[[str], None]


class Pipeline(Protocol):
    """What a sink reads of a pipeline (eosflow.pipelines.Pipeline is one): named here, not imported, so
    the declaration's parser can look sinks up without a circle back to it. Read-only properties, so a
    frozen dataclass satisfies it."""

    @property
    def name(self) -> str: ...

    @property
    def topics(self) -> tuple[str, ...]: ...

    @property
    def topic(self) -> str: ...

    @property
    def schema(self) -> RecordSchema: ...

    @property
    def delivery(self) -> Delivery: ...

    @property
    def max_value_bytes(self) -> int: ...

    @property
    def transform_version(self) -> str: ...

    @property
    def sink(self) -> Sink: ...

    @property
    def target_table(self) -> str: ...


class Finding(Protocol):
    """One check of a verdict that failed, as the DAG's error quotes it."""

    def describe(self) -> str: ...


class Verdict(Protocol):
    """What a sink's verification found: printed by the CLI and the DAG, kept in eosflow.checks."""

    @property
    def pipeline(self) -> str: ...

    @property
    def returncode(self) -> int: ...

    @property
    def ok(self) -> bool: ...

    @property
    def checks(self) -> Sequence[object]: ...

    @property
    def failed(self) -> Sequence[Finding]: ...

    def table(self) -> str: ...

    def check_rows(self) -> list[tuple[str, str | None, str, int, str, str | None]]:
        """(name, invariant, status, failures, offending rows as JSON, message) per check."""
        ...


class Compaction(Protocol):
    """What a sink's `compact` did: the CLI prints its line, the compact DAG logs it."""

    def line(self) -> str: ...


@dataclass(frozen=True)
class Run:
    """One run's plan and what a sink's write needs from the runner."""

    settings: Settings
    pipeline: Pipeline
    plan: Plan
    log: Log
    # read(phase): start Spark, read the planned ranges and check them; the block is timed as `phase`.
    read: Callable[[str], AbstractContextManager[TransformResult]]
    # time(phase): time a step of the sink's own as `phase` in the run's summary.
    time: Callable[[str], AbstractContextManager[None]]
    # time_within(step): time a part of a phase (the commit's state apply); shown after the phases' total,
    # not added to it.
    time_within: Callable[[str], AbstractContextManager[None]]
    # The topics read are the ones planned (not re-created since): TopicRecreatedError otherwise.
    check_topics_unchanged: Callable[[], None]


class Sink(ABC):
    """Where a pipeline's records land. Subclasses are frozen dataclasses of their declaration keys."""

    kind: ClassVar[str]  # the `sink:` value in pipelines.yml
    keys: ClassVar[frozenset[str]]  # the pipeline keys this sink declares (beyond every pipeline's)
    truth: ClassVar[str]  # where a commit's truth lives: "warehouse", or the system the ledger mirrors
    task_modules: ClassVar[tuple[str, ...]] = ()  # what its Spark tasks import (a stream warms them up)
    # Whether it keeps a change stream's state table (`changes:`, docs/DESIGN.md "Change streams").
    keeps_state: ClassVar[bool] = False
    # The delivery modes it keeps that state under: exactly_once unless its commit can apply the state in
    # a split one's output transaction (docs/DESIGN.md "Delivery modes").
    state_deliveries: ClassVar[tuple[Delivery, ...]] = (Delivery.EXACTLY_ONCE,)
    # Whether its commit already commits the positions to the pipeline's Kafka consumer group (its
    # transactions do): then no lag report follows it (docs/DESIGN.md "Lag in Kafka's own tools").
    commits_consumer_group: ClassVar[bool] = False

    # --- the declaration

    @classmethod
    @abstractmethod
    def declare(cls, spec: Mapping[str, Any], schema: RecordSchema, where: str) -> Sink:
        """The sink from a pipeline's entry (all of it: a sink may refuse a delivery mode or a topic);
        PipelineConfigError naming `where`, the key and what is expected if it is wrong."""

    @property
    @abstractmethod
    def output(self) -> str:
        """What the pipeline writes, as people name it ("raw.orders", "topic orders.out"); unique among
        the declared pipelines."""

    @property
    def table(self) -> str | None:
        """The warehouse table holding the output, if any: dbt's models, the marts and a round trip
        are built on it."""
        return None

    @abstractmethod
    def output_uri(self, settings: Settings) -> str:
        """The output as a lineage asset URI (postgres://host:port/db/schema/table, kafka://host/topic)."""

    def lineage_outputs(self, settings: Settings) -> tuple[str, ...]:
        """Every dataset a run writes, as lineage URIs (OpenLineage's outputs): the output first, then what
        the sink keeps beside it in the same commit (a change stream's state table)."""
        return (self.output_uri(settings),)

    def describe(self) -> str:
        """The output in a DAG's Markdown description."""
        return f"`{self.output}`"

    # --- a run

    @abstractmethod
    def prepare(self, conn: psycopg.Connection, settings: Settings, pipeline: Pipeline, log: Log) -> None:
        """Before planning: the targets exist, and the ledger shows everything the sink committed."""

    @abstractmethod
    def write(self, conn: psycopg.Connection, run: Run) -> object:
        """Step 4: each planned range written by the Spark task that reads it. Returns what `commit`
        needs (counts, per-range outcomes); a sink whose truth is elsewhere may commit ranges here."""

    @abstractmethod
    def commit(
        self, conn: psycopg.Connection, run: Run, written: object
    ) -> tuple[str, Mapping[Key, PartitionCounts]]:
        """Step 5: the batch's outcome (COMMITTED or ALREADY_COMMITTED) and counts, or FencedError."""

    def refuse_backfill(self, pipeline: Pipeline, mode: str) -> None:
        """BackfillError if this sink cannot take a backfill of `mode` (catch-up, replay); checked
        before anything is planned. Every mode by default."""
        return None

    # --- after a run

    @abstractmethod
    def verify(self, settings: Settings, pipeline: Pipeline, marts: bool) -> Verdict:
        """The invariants on what the sink holds (and the marts, where there are some and `marts`)."""

    def latencies(
        self, settings: Settings, pipeline: Pipeline, plan: Plan, committed_at: float
    ) -> tuple[float, ...]:
        """Seconds from each committed record's Kafka timestamp to `committed_at`, where the sink can
        read them back cheaply (a stream's latency figures); none otherwise."""
        return ()

    def open_transactions(
        self, settings: Settings, pipeline: Pipeline, abort: bool, log: Log
    ) -> list[object] | None:
        """Transactions of this pipeline still open in the sink (after aborting them, if `abort`);
        None if the sink keeps no transactions open between runs."""
        return None

    def compact(
        self, conn: psycopg.Connection, pipeline: Pipeline, target_rows: int | None, log: Log
    ) -> Compaction | None:
        """Merge what many small commits left (`eosflow compact`); None, with a line to `log` saying
        why, when there is nothing to compact."""
        log(f"{pipeline.name}: {self.output} has nothing to compact")
        return None

    def compact_stream(
        self, conn: psycopg.Connection, pipeline: Pipeline, between: Callable[[int], bool]
    ) -> Compaction | None:
        """What a stream runs beside its batches every --compact-every: merge the small pieces its own
        commits left, in work that grows with what they hold, not with the output (docs/DESIGN.md "Stream
        mode"); None when there was nothing to merge. `conn` is in autocommit mode, on a thread of its own.
        between(pieces): called between two pieces of the work with how many there are; it paces them,
        and says False when the stream stops (the rest left for its next start)."""
        return None
