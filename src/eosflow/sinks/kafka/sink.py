"""The Kafka sink (`sink: kafka`): exactly once between Kafka topics; its truth is Kafka.

Each Spark task produces its range's records and commits the consumed offsets in the same Kafka
transaction (produce.py); the run then mirrors the committed ranges into the ledger (ledger_mirror.py),
and the next run first mirrors whatever a crash left unmirrored. `eosflow verify` reads Kafka back
(verify.py); `eosflow kafka transactions` shows and aborts open transactions (transactions.py).
A change stream's output topic is its state, compacted: each range restores its partition's last record
per key before producing (state.py, restore.py), and verify checks each key's last record (verify_state.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import psycopg

from eosflow import names
from eosflow.declaration_numbers import whole_number
from eosflow.delivery import Delivery
from eosflow.errors import PipelineConfigError
from eosflow.faults import fault_point
from eosflow.ledger.backfill import BackfillMode
from eosflow.schema.declaration import RecordSchema
from eosflow.settings import Settings
from eosflow.sinks.protocol import Log, Pipeline, Run, Sink, Verdict

if TYPE_CHECKING:
    from eosflow.ledger.mirror import RangeOutcome
    from eosflow.ledger.positions import Key

OUTPUT_FORMATS = ("json", "avro", "protobuf")
# A day: an open transaction holds back every read_committed consumer of its partitions that long; the
# broker's own ceiling (transaction.max.timeout.ms, 15 minutes by default) is checked when a run starts.
MAX_TRANSACTION_TIMEOUT_MS = 86_400_000
_TIMEOUT_WHY = (
    "an open transaction holds back every read_committed reader; the broker's own limit applies too"
)


@dataclass(frozen=True)
class KafkaSink(Sink):
    """Where a `sink: kafka` pipeline writes: one Kafka transaction per source partition and run."""

    kind: ClassVar[str] = "kafka"
    keys: ClassVar[frozenset[str]] = frozenset(
        {"output_topic", "dead_letter_topic", "output_key", "output_format", "transaction_timeout_ms"}
    )
    truth: ClassVar[str] = "kafka"
    task_modules: ClassVar[tuple[str, ...]] = ("eosflow.sinks.kafka.produce",)
    # A change stream's state is its compacted output topic (state.py; DESIGN "State in Kafka").
    keeps_state: ClassVar[bool] = True
    commits_consumer_group: ClassVar[bool] = True  # produce.group_id: its positions, in its transactions

    output_topic: str
    dead_letter_topic: str  # rejected records, in the same transaction as the output
    key_column: str | None = None  # None: the source record's key, byte for byte
    transaction_timeout_ms: int = 60_000
    output_format: str = "json"  # json | avro | protobuf (the last two registered under <topic>-value)

    @classmethod
    def declare(cls, spec: Mapping[str, Any], schema: RecordSchema, where: str) -> KafkaSink:
        topics = {}
        for key in ("output_topic", "dead_letter_topic"):
            if key not in spec and key == "dead_letter_topic":
                continue
            topic = spec.get(key)
            topics[key] = names.output_topic(
                topic, key, where, " (sink: kafka needs one)" if topic is None else ""
            )
        output = topics["output_topic"]
        dead_letter = topics.get("dead_letter_topic", f"{output}.rejected")
        if output in spec["topics"] or dead_letter in spec["topics"] or output == dead_letter:
            raise PipelineConfigError(
                f"{where}: output_topic {output!r}, dead_letter_topic {dead_letter!r} and the source topics "
                "must all differ: a pipeline that reads its own output would never finish"
            )
        key_column = spec.get("output_key")
        if key_column is not None and key_column not in {c.name for c in schema.columns}:
            raise PipelineConfigError(
                f"{where}: output_key {key_column!r} is not a declared column; one of "
                f"{[c.name for c in schema.columns]}, or leave it out to keep each source record's key"
            )
        if schema.changes is not None:
            _refuse_for_changes(spec, schema, key_column, where)
        timeout = whole_number(
            spec,
            "transaction_timeout_ms",
            60_000,
            where,
            low=1_000,
            high=MAX_TRANSACTION_TIMEOUT_MS,
            why=_TIMEOUT_WHY,
        )
        if spec.get("delivery") == Delivery.AT_MOST_ONCE:
            raise PipelineConfigError(
                f"{where}: a kafka sink delivers exactly_once, or at_least_once for comparison; at_most_once "
                "is a warehouse sink's comparison mode only"
            )
        output_format = spec.get("output_format", "avro" if schema.format == "avro" else "json")
        if output_format not in OUTPUT_FORMATS:
            raise PipelineConfigError(
                f"{where}: output_format {output_format!r} unknown; one of {list(OUTPUT_FORMATS)} (default: "
                "avro for an Avro input, json otherwise)"
            )
        return cls(output, dead_letter, key_column, timeout, output_format)

    @property
    def output(self) -> str:
        return f"topic {self.output_topic}"

    def output_uri(self, settings: Settings) -> str:
        from eosflow.assets import topic_uri

        return topic_uri(settings, self.output_topic)

    def describe(self) -> str:
        return f"Kafka topic `{self.output_topic}`"

    def prepare(self, conn: psycopg.Connection, settings: Settings, pipeline: Pipeline, log: Log) -> None:
        """The output topics checked (or made), the ledger caught up with what Kafka committed, and an
        offset the group forgot restored from the ledger (forgotten.py)."""
        from eosflow.sinks.kafka import forgotten, ledger_mirror, topics

        if self.output_format != "json" and settings.registry is None:
            raise PipelineConfigError(
                f"pipeline {pipeline.name!r} writes {self.output_format} to {self.output_topic}, and no "
                "schema registry is configured: set EOSFLOW_SCHEMA_REGISTRY_URL, or output_format: json"
            )
        topics.prepare(settings.kafka, pipeline, log)
        ledger_mirror.reconcile(conn, settings.kafka, pipeline, log)
        forgotten.restore(conn, settings.kafka, pipeline, log)

    def write(self, conn: psycopg.Connection, run: Run) -> dict:
        """Each Spark task reads its range, checks it, and produces it with its offsets in one Kafka
        transaction: the ranges are committed in Kafka when this returns (the outcomes say which)."""
        from eosflow.sinks.kafka import produce

        settings, pipeline, plan = run.settings, run.pipeline, run.plan
        if not plan.nonempty:  # no record to read: only first ranges and losses, offsets alone, no Spark
            return {
                (p.range.topic, p.range.partition): produce.offsets_only(
                    settings.kafka, pipeline, p, plan.batch_id
                )
                for p in plan.partitions
                if p.first_seen or p.lost is not None
            }
        run.check_topics_unchanged()  # before any range commits: nothing would undo it
        with run.read("read+transform+produce") as result:
            encode = self._encoder(settings, pipeline)
            outcomes = produce.produce_plan(settings.kafka, pipeline, plan, result, encode)
        # Each task checked its range before committing it (produce.RangeTransaction.commit).
        run.log(
            f"produced {sum(o.written for o in outcomes.values()):,} records to {self.output_topic} and "
            f"{sum(o.rejected for o in outcomes.values()):,} to {self.dead_letter_topic}, each range with "
            "its offsets in one Kafka transaction: "
            + ", ".join(f"{t}[{p}] {o.outcome}" for (t, p), o in sorted(outcomes.items()))
        )
        return outcomes

    def _encoder(self, settings: Settings, pipeline: Pipeline) -> Callable[[Sequence[object]], bytes] | None:
        """None for JSON; else the declared columns' schema, registered under <output_topic>-value, and
        its encoder (eosflow.schema.avro_out, eosflow.schema.protobuf_out)."""
        if self.output_format == "json":
            return None
        schema = pipeline.schema
        if schema.changes is not None:  # the values are row images: the declared columns alone
            from eosflow.sinks.kafka.state import image_schema

            schema = image_schema(schema)
        registry = settings.registry
        assert registry is not None  # prepare refused a non-JSON output without a registry
        if self.output_format == "avro":
            from eosflow.schema.avro_out import register_output as register_avro

            return register_avro(registry, pipeline.name, schema, self.output_topic)
        from eosflow.schema.protobuf_out import register_output as register_protobuf

        return register_protobuf(registry, pipeline.name, schema, self.output_topic)

    def commit(self, conn: psycopg.Connection, run: Run, written: object):
        from eosflow.sinks.kafka import ledger_mirror

        fault_point("in_commit")  # committed in Kafka, not yet mirrored in the ledger
        with run.time("ledger mirror"):
            return ledger_mirror.mirror(conn, run.plan, cast("dict[Key, RangeOutcome]", written))  # write's

    def refuse_backfill(self, pipeline: Pipeline, mode: str) -> None:
        """A replay re-writes committed records; into a topic that is a second copy for every consumer."""
        if mode == BackfillMode.REPLAY:
            from eosflow.ledger.backfill import BackfillError

            raise BackfillError(
                f"pipeline {pipeline.name!r} writes to Kafka topic {self.output_topic!r}: a replay would "
                "append a second copy of the range for every downstream consumer, which no one can take "
                "back. Not done. To re-derive a range, write it to a new output_topic with a new pipeline; "
                "catch-up backfills are fine."
            )

    def verify(self, settings: Settings, pipeline: Pipeline, marts: bool) -> Verdict:
        """No table to build models on: Kafka is read back instead."""
        if pipeline.schema.changes is not None:
            from eosflow.sinks.kafka.verify_state import verify_state_topic

            return verify_state_topic(settings, pipeline)
        from eosflow.sinks.kafka.verify import verify_kafka_sink

        return verify_kafka_sink(settings, pipeline)

    def open_transactions(
        self, settings: Settings, pipeline: Pipeline, abort: bool, log: Log
    ) -> list[object] | None:
        from eosflow.sinks.kafka import transactions

        if abort:
            transactions.abort_open(settings.kafka, pipeline, log=log)
        return list(transactions.held_back(settings.kafka, pipeline))

    def compact(self, conn: psycopg.Connection, pipeline: Pipeline, target_rows: int | None, log: Log):
        log(f"{pipeline.name}: writes to Kafka, no table to compact")
        return None


def _refuse_for_changes(
    spec: Mapping[str, Any], schema: RecordSchema, key_column: str | None, where: str
) -> None:
    """A change stream's output topic is its state: keyed by the primary key, one partition per source
    partition of the same number, written by one transaction at a time (DESIGN "State in Kafka")."""
    if key_column is not None:
        raise PipelineConfigError(
            f"{where}: output_key {key_column!r} with changes: {schema.changes}: the output topic of a "
            f"change stream is keyed by its primary key {list(schema.primary_key)} (a JSON object of its "
            "columns, as Debezium keys its topics), so compaction keeps each row's last change; "
            "remove output_key"
        )
    if len(spec["topics"]) > 1:
        raise PipelineConfigError(
            f"{where}: changes: {schema.changes} into sink: kafka reads one topic (a table's), not "
            f"{len(spec['topics'])}: the ranges of two topics' partitions of one number would write one "
            "output partition in two transactions, and neither would see the other's records before "
            "producing; declare a pipeline per topic, each with its own output_topic"
        )
