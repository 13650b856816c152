"""The Kafka sink: each planned range produced, with its offsets, in one Kafka transaction.

The warehouse sink stages rows and commits them with the ledger in one Postgres transaction
(stage.py, commit.py). A `sink: kafka` pipeline commits in Kafka instead, the way Kafka's own
exactly-once processing does: inside the Spark task that reads a source partition's planned range,

1. a transactional producer with a `transactional.id` fixed per (pipeline, source topic, source
   partition) calls `init_transactions`, which fences every earlier holder of the id (a retried or
   speculative task, a zombie run) and aborts the transaction it left open;
2. only then the task reads the consumer group `eosflow.<pipeline>`'s committed offset for the
   partition (read_committed, so it is stable) and compares it with the plan: the planned start
   means go on, the planned end committed by this batch means already done, anything else FENCED;
3. it produces the output records and the rejected ones (to the dead-letter topic), sends the
   range's end offset with `send_offsets_to_transaction`, and commits: all of it or nothing.

The committed offset's metadata carries the batch id and its counts, so the warehouse ledger can
mirror a range Kafka committed even when the run died right after (ledger_mirror.py). Never an empty
transaction: a range that delivered no record commits its offsets alone, and only when it must
(a first range, or an acknowledged loss).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException

from eosflow.delivery import Delivery
from eosflow.faults import fault_point
from eosflow.kafka_admin import PRODUCER_MAX_BYTES, TopicLimits, topic_limits
from eosflow.ledger.mirror import FENCED, TIMED_OUT, RangeOutcome
from eosflow.ledger.positions import ALREADY_COMMITTED, COMMITTED, expected_position
from eosflow.ledger.ranges import PartitionPlan, Plan
from eosflow.schema.arrow import json_text
from eosflow.sinks.kafka.json_out import json_value, plain
from eosflow.sinks.kafka.output import Output, output_of
from eosflow.sinks.protocol import Pipeline
from eosflow.sources.kafka import lag_group
from eosflow.sources.kafka.read import ReadOutsidePlanError

if TYPE_CHECKING:
    from eosflow.transform import BatchCheck, TransformResult


SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET = (
    "eosflow-source-topic",
    "eosflow-source-partition",
    "eosflow-source-offset",
)
ERROR_HEADER = "eosflow-error"
_RECORD_OVERHEAD = 512  # a record's framing and headers beyond its key and value, generously
_TIMEOUT_S = 60.0
OUTCOME_SCHEMA = (
    "kafka_topic string, kafka_partition int, outcome string, n long, written long, rejected long, "
    "lo long, hi long, detail string"
)


def group_id(pipeline: str) -> str:
    """The consumer group whose committed offsets are a Kafka-sink pipeline's positions: the one every
    other pipeline reports its lag to by default (sources/kafka/lag_group.py)."""
    return lag_group.default(pipeline)


def transactional_id(pipeline: str, topic: str, partition: int) -> str:
    """Fixed per (pipeline, source topic, source partition): never per attempt or per run, so the
    next holder always fences the last one."""
    return f"eosflow.{pipeline}.{topic}.{partition}"


def commit_metadata(batch_id: str, read: int, written: int, rejected: int) -> str:
    """The committed offset's metadata: which batch moved it, with its counts (ledger_mirror.py reads it)."""
    return json.dumps({"batch": batch_id, "read": read, "written": written, "rejected": rejected})


def parse_metadata(text: str | None) -> dict:
    try:
        body = json.loads(text or "")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def decide(
    part: PartitionPlan, batch_id: str, group: str, committed: int | None, metadata: str | None
) -> tuple[str | None, str]:
    """Compare the group's committed offset (None: none) with the plan, after the fencing.

    Returns (None, "") to go on, or (ALREADY_COMMITTED or FENCED, why). The end alone does not mean done:
    another batch planned from the same start may have committed the same end first.
    """
    r = part.range
    by = parse_metadata(metadata).get("batch")
    if committed == r.end and by == batch_id:
        return ALREADY_COMMITTED, f"{r} was committed by this batch earlier"
    expected = expected_position(part)
    if committed == expected:
        return None, ""
    planned = "no committed offset" if expected is None else f"offset {expected}"
    found = "none" if committed is None else f"{committed}" + (f" (committed by batch {by})" if by else "")
    return FENCED, f"{r.topic}[{r.partition}] planned from {planned}, group {group} has {found}"


def output_key(value: object) -> bytes | None:
    """A declared column's value as a record key: text as UTF-8, anything else in its JSON form."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return json_text(plain(value)).encode()


class RangeTransaction:
    """One planned range's Kafka transaction: fence, check the position, produce, send offsets, commit.

    delivery at_least_once (the lab's comparison) uses a plain idempotent producer and commits the
    offsets after the records: a crash in between produces them twice.
    """

    def __init__(
        self,
        kafka: Mapping[str, str],
        pipeline: str,
        delivery: Delivery,
        sink: Output,
        part: PartitionPlan,
        batch_id: str,
        limit: TopicLimits | None = None,
    ) -> None:
        """limit: the output topics' record limit (kafka_admin.topic_limits), asked once by the driver."""
        from confluent_kafka import Consumer, Producer

        self.part, self.batch_id, self.sink = part, batch_id, sink
        self.group = group_id(pipeline)
        self.transactional = delivery == Delivery.EXACTLY_ONCE
        self.limit = limit or TopicLimits(int(kafka.get("message.max.bytes", PRODUCER_MAX_BYTES)))
        producer_config = {
            **kafka,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            **self.limit.producer_config(),
        }
        if self.transactional:
            producer_config |= {
                "transactional.id": transactional_id(pipeline, part.range.topic, part.range.partition),
                "transaction.timeout.ms": sink.transaction_timeout_ms,
            }
        self.producer = Producer(producer_config)
        self.consumer = Consumer(
            {
                **kafka,
                "group.id": self.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.read = self.written = self.rejected = 0
        self.fatal: KafkaError | None = None  # what made the producer unusable (fenced, most often)
        self.undelivered: str | None = None  # at_least_once: the first failed delivery
        self.began = time.monotonic()
        self.lo: int | None = None
        self.hi: int | None = None
        self.source = part.range.topic.encode(), str(part.range.partition).encode()

    def open(self, before: Callable[[], None] | None = None) -> tuple[str | None, str]:
        """Fence earlier holders, then decide from the committed offset; begins the transaction to go on.
        before: run once the decision is to go on, before the transaction begins (a change stream's
        restore of its output partition: state.py)."""
        from confluent_kafka import TopicPartition

        if self.transactional:
            self.producer.init_transactions(_TIMEOUT_S)  # fences, and aborts what a zombie left open
        r = self.part.range
        (tp,) = committed(self.consumer, [TopicPartition(r.topic, r.partition)], _TIMEOUT_S)
        offset = tp.offset if tp.offset >= 0 else None
        outcome, why = decide(self.part, self.batch_id, self.group, offset, tp.metadata)
        if outcome == ALREADY_COMMITTED:  # the counts the committing attempt recorded with its offsets
            meta = parse_metadata(tp.metadata)
            self.read, self.written, self.rejected = (meta.get(k, 0) for k in ("read", "written", "rejected"))
        if outcome is None and before is not None:
            before()
        if outcome is None and self.transactional:
            self.producer.begin_transaction()
            self.began = time.monotonic()
        return outcome, why

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        offset: int,
        error: str | None = None,
        extra: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> bool:
        """One record into the transaction. A record above message.max.bytes would fail the task on every
        retry: an output record becomes a dead letter saying so, a dead letter loses its value (its source
        coordinates still name it). Returns whether it went to `topic` as asked.

        extra: headers after the source coordinates; partition: the output partition (a change stream's,
        the source partition's number), only for `topic` as asked (a dead letter goes where Kafka puts it).
        """
        headers: list[tuple[str, str | bytes | None]] = [
            (SOURCE_TOPIC, self.source[0]),
            (SOURCE_PARTITION, self.source[1]),
            (SOURCE_OFFSET, str(offset).encode()),
            *extra,
        ]
        as_asked = True
        keyless = self.limit.keyless_refused(topic) if key is None and error is None else None
        if keyless is not None:  # the output record, as it would have been, with the reason
            topic, error, as_asked = (
                self.sink.dead_letter_topic,
                f"the output record has no key and {keyless}",
                False,
            )
        size = len(value or b"") + len(key or b"")
        if size > self.limit.bytes - _RECORD_OVERHEAD:
            too_large = f"the record is {size:,} bytes, above {self.limit}"
            if error is None:
                topic, error, as_asked = self.sink.dead_letter_topic, f"output {too_large}", False
            else:
                error = f"{error}; {too_large}: its value stays in the source, at its coordinates"
            value = None
        if error is not None:
            headers.append((ERROR_HEADER, error.encode()))
        where = {"partition": partition} if as_asked and partition is not None else {}
        if self.fatal is not None:
            return as_asked  # nothing more can commit: commit() says why
        # Inside a transaction a failed delivery fails commit_transaction, naming the cause; and no
        # Python callback may run after a fatal error (confluent-kafka raises that error from the same
        # poll, so purged records' reports would run with it pending).
        report = None if self.transactional else functools.partial(self.delivered, topic)
        while True:
            try:
                # **where: mypy cannot match a dict's keys to the keywords
                self.producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=headers,
                    on_delivery=report,
                    **where,  # type: ignore[arg-type]
                )
                return as_asked
            except BufferError:  # the local queue is full: let deliveries drain, then retry
                self.poll(0.1)
                if self.fatal is not None:
                    return as_asked
            except KafkaException as exc:  # a fatal producer refuses new records
                self.fatal = exc.args[0]
                return as_asked

    def poll(self, timeout: float = 0) -> None:
        """Serve delivery reports; a fatal error (this attempt was fenced) is kept for commit()."""
        try:
            self.producer.poll(timeout)
        except KafkaException as exc:
            if not exc.args[0].fatal():
                raise
            self.fatal = exc.args[0]

    def delivered(self, topic: str, error: KafkaError | None, _message) -> None:
        if error is not None and self.undelivered is None:
            self.undelivered = f"delivery to {topic} failed: {error.str()}"

    def count(self, offsets: Sequence[int], written: int, rejected: int) -> None:
        if offsets:
            self.read += len(offsets)
            self.lo = offsets[0] if self.lo is None else min(self.lo, offsets[0])
            self.hi = offsets[-1] if self.hi is None else max(self.hi, offsets[-1])
        self.written += written
        self.rejected += rejected

    def commit(self) -> RangeOutcome:
        """The range's end offset with the records, atomically (or, at_least_once, after them)."""
        from confluent_kafka import TopicPartition

        r = self.part.range
        outside = False
        if self.read:
            assert self.lo is not None and self.hi is not None  # count() set them with the first offsets
            outside = self.lo < r.start or self.hi >= r.end or self.read > r.span
        if outside:
            if self.transactional:
                self.producer.abort_transaction(_TIMEOUT_S)
            raise ReadOutsidePlanError(
                f"batch {self.batch_id}: read {self.read} records at offsets {self.lo}..{self.hi} of "
                f"{r.topic}[{r.partition}], planned {r}: the transaction was aborted, nothing was written"
            )
        offsets = [
            TopicPartition(
                r.topic,
                r.partition,
                r.end,
                commit_metadata(self.batch_id, self.read, self.written, self.rejected),
            )
        ]
        if self.transactional:
            try:
                if self.fatal is not None:
                    raise KafkaException(self.fatal)
                remaining = self.producer.flush(_TIMEOUT_S)
                if remaining:
                    raise TimeoutError(f"{r}: {remaining} records not delivered in {_TIMEOUT_S:.0f}s")
                fault_point("in_kafka_transaction")  # records in the log, transaction open
                self.producer.send_offsets_to_transaction(
                    offsets, self.consumer.consumer_group_metadata(), _TIMEOUT_S
                )
                self.producer.commit_transaction(_TIMEOUT_S)
            except KafkaException as exc:
                took = time.monotonic() - self.began
                if took * 1000 >= self.sink.transaction_timeout_ms:
                    # The coordinator aborted it for its age (and bumped the epoch): not another run.
                    return self.outcome(
                        TIMED_OUT,
                        f"{r}: {took:.0f} s inside its transaction, above transaction_timeout_ms "
                        f"({self.sink.transaction_timeout_ms})",
                    )
                if exc.args[0].code() not in _FENCED_CODES:
                    raise
                # A newer holder of the id initialised it: this attempt is a zombie, and the broker
                # aborted (or will abort) everything it produced.
                return self.outcome(FENCED, f"{r}: fenced by a newer holder of its transactional id")
        else:
            remaining = self.producer.flush(_TIMEOUT_S)
            if remaining:
                raise TimeoutError(f"{r}: {remaining} records not delivered in {_TIMEOUT_S:.0f}s")
            if self.undelivered is not None:  # before the offsets: what was not delivered is read again
                raise RuntimeError(f"{r}: {self.undelivered}; its offsets were not committed")
            fault_point("in_kafka_transaction")  # records delivered, offsets not committed
            self.consumer.commit(offsets=offsets, asynchronous=False)
        return self.outcome(COMMITTED)

    def outcome(self, outcome: str, detail: str = "") -> RangeOutcome:
        r = self.part.range
        return RangeOutcome(
            r.topic, r.partition, outcome, self.read, self.written, self.rejected, self.lo, self.hi, detail
        )

    def close(self) -> None:
        # No flush: commit() flushed what had to be delivered, and a fenced producer's flush raises
        # its fatal error again, which would turn a clean FENCED into a failed task.
        self.consumer.close()


# The group coordinator is moving or loading (a new cluster creates __consumer_offsets on first use,
# a broker restart moves it): librdkafka's committed() reports these instead of waiting them out.
_COORDINATOR_CODES = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def committed(consumer, partitions: list, timeout_s: float, sleep=time.sleep) -> list:
    """consumer.committed(), retried while the group's coordinator moves or loads, within timeout_s."""
    deadline = time.monotonic() + timeout_s
    pause = 0.1
    while True:
        try:
            return consumer.committed(partitions, timeout=max(deadline - time.monotonic(), 1.0))
        except KafkaException as exc:
            if exc.args[0].code() not in _COORDINATOR_CODES or time.monotonic() + pause > deadline:
                raise
        sleep(pause)
        pause = min(pause * 2, 2.0)


_FENCED_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def range_producer(
    kafka: Mapping[str, str],
    pipeline: Pipeline,
    plan: Plan,
    check: BatchCheck,
    encode: Callable[[Sequence[object]], bytes] | None = None,
    limit: TopicLimits | None = None,
) -> Callable[[Iterator], Iterator]:
    """The function each Spark task runs over the Arrow batches of its one planned range (mapInArrow).

    encode: a valid record's typed columns -> the output value (default: JSON; Avro: schema.avro_out).
    """
    parts = {(p.range.topic, p.range.partition): p for p in plan.partitions}
    sink, name, delivery, batch_id = output_of(pipeline), pipeline.name, pipeline.delivery, plan.batch_id
    names = [c.name for c in pipeline.schema.columns]
    image_encode = encode  # a change stream's values are its row images (None: JSON of them)
    encode = encode or functools.partial(json_value, names)
    key_index = names.index(sink.key_column) if sink.key_column else None
    changes = pipeline.schema.changes is not None

    def write(batches: Iterator) -> Iterator:
        import pyarrow as pa

        txn = None
        state = None
        result: RangeOutcome | None = None
        try:
            for batch in batches:
                if batch.num_rows == 0 or result is not None:
                    continue  # drained: Spark hands the whole range either way
                if txn is None:
                    key = (batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
                    txn = RangeTransaction(kafka, name, delivery, sink, parts[key], batch_id, limit)
                    before = None
                    if changes:  # the output partition's last record per key, before anything is produced
                        state = change_state(pipeline, image_encode)
                        before = functools.partial(restore_state, kafka, sink.output_topic, key[1], state)
                    outcome, why = txn.open(before)
                    if outcome is not None:
                        result = txn.outcome(outcome, why)
                        continue
                results, _, _ = check.records(batch)
                keys = batch.column("key").to_pylist()
                values = batch.column("value").to_pylist()
                offsets = batch.column("offset").to_pylist()
                if state is not None:
                    written = produce_changes(txn, state, sink, results, keys, values, offsets)
                    txn.count(offsets, written, len(offsets) - written)
                    txn.poll()
                    continue
                written = 0
                for i, (error, typed) in enumerate(results):
                    if error is None:
                        assert typed is not None  # a record that passed has its typed columns
                        k = keys[i] if key_index is None else output_key(typed[key_index])
                        written += txn.produce(sink.output_topic, k, encode(typed), offsets[i])
                    else:
                        txn.produce(sink.dead_letter_topic, keys[i], values[i], offsets[i], error)
                txn.count(offsets, written, len(offsets) - written)
                txn.poll()
            if txn is not None and result is None:
                result = txn.commit()
        finally:
            if txn is not None:
                txn.close()
        rows = [result] if result is not None else []
        yield pa.RecordBatch.from_pylist(
            [_row(o) for o in rows],
            schema=pa.schema(
                [
                    ("kafka_topic", pa.string()),
                    ("kafka_partition", pa.int32()),
                    ("outcome", pa.string()),
                    ("n", pa.int64()),
                    ("written", pa.int64()),
                    ("rejected", pa.int64()),
                    ("lo", pa.int64()),
                    ("hi", pa.int64()),
                    ("detail", pa.string()),
                ]
            ),
        )

    return write


def change_state(pipeline: Pipeline, encode: Callable[[Sequence[object]], bytes] | None):
    from eosflow.schema.avro_out import AvroOutput
    from eosflow.sinks.kafka.state import PartitionState, avro_image

    decode = functools.partial(avro_image, encode) if isinstance(encode, AvroOutput) else None
    return PartitionState(pipeline.schema, encode, output_of(pipeline).output_format, decode)


def restore_state(kafka: Mapping[str, str], topic: str, partition: int, state) -> None:
    import sys

    from eosflow.sinks.kafka.restore import restore

    read, took = restore(kafka, topic, partition, state)
    print(
        f"eosflow: restored {topic}[{partition}]: {len(state.restored):,} keys from {read:,} records in "
        f"{took:.2f} s",
        file=sys.stderr,
        flush=True,
    )


def produce_changes(
    txn: RangeTransaction, state, sink: Output, results, keys: list, values: list, offsets: list
) -> int:
    """A change stream's checked records, in the range's order (state.PartitionState decides each); returns
    how many count as written (Debezium's own tombstones among them, which produce nothing)."""
    from eosflow.sinks.kafka.state import Produce, Reject

    partition = int(txn.source[1])
    written = 0
    for i, (error, typed) in enumerate(results):
        action = None
        if error is None:
            action = state.apply(typed, partition, offsets[i])
            if isinstance(action, Reject):
                error = action.reason
        if error is not None:
            txn.produce(sink.dead_letter_topic, keys[i], values[i], offsets[i], error)
        elif isinstance(action, Produce):
            if txn.produce(
                sink.output_topic, action.key, action.value, offsets[i], None, action.headers, partition
            ):
                state.produced(action)
                written += 1
        else:  # Debezium's tombstone: it changes nothing
            written += 1
    return written


def _row(o: RangeOutcome) -> dict:
    return {
        "kafka_topic": o.topic,
        "kafka_partition": o.partition,
        "outcome": o.outcome,
        "n": o.read,
        "written": o.written,
        "rejected": o.rejected,
        "lo": o.lo,
        "hi": o.hi,
        "detail": o.detail,
    }


def offsets_only(
    kafka: Mapping[str, str], pipeline: Pipeline, part: PartitionPlan, batch_id: str
) -> RangeOutcome:
    """A range that delivered no record (only aborted records or markers, a first empty range, an
    acknowledged loss): its offsets alone, in a transaction of the same id, so the position moves."""
    txn = RangeTransaction(kafka, pipeline.name, pipeline.delivery, output_of(pipeline), part, batch_id)
    try:
        outcome, why = txn.open()
        return txn.outcome(outcome, why) if outcome is not None else txn.commit()
    finally:
        txn.close()


def produce_plan(
    kafka: Mapping[str, str],
    pipeline: Pipeline,
    plan: Plan,
    result: TransformResult,
    encode: Callable[[Sequence[object]], bytes] | None = None,
) -> dict[tuple[str, int], RangeOutcome]:
    """Run every planned range's transaction: in the Spark tasks, then the record-less ones here."""
    sink = output_of(pipeline)
    limit = topic_limits(kafka, [sink.output_topic, sink.dead_letter_topic])
    producer = range_producer(kafka, pipeline, plan, result.check, encode, limit)
    rows = result.map_records(producer, OUTCOME_SCHEMA).collect()
    outcomes = {
        (r.kafka_topic, r.kafka_partition): RangeOutcome(
            r.kafka_topic, r.kafka_partition, r.outcome, r.n, r.written, r.rejected, r.lo, r.hi, r.detail
        )
        for r in rows
    }
    for part in plan.partitions:
        key = (part.range.topic, part.range.partition)
        if key not in outcomes and (not part.range.empty or part.first_seen or part.lost is not None):
            outcomes[key] = offsets_only(kafka, pipeline, part, plan.batch_id)
    return outcomes
