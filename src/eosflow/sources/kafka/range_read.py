"""Step 2 inside the task: read exactly one planned range with librdkafka (confluent-kafka), read_committed.

A Spark task gets one planned range (topic, partition, start, end) and reads it here, in its own
Python worker, into Arrow batches of the columns the check takes (`RECORD_COLUMNS`, the shape Spark's
Kafka source had with the headers as JSON text). The consumer is `assign`ed at `start` (no group,
nothing committed to Kafka): under read_committed, librdkafka skips aborted records and transaction
markers, which leave holes in the offsets, as compaction does. The range ends at the first record at
or past `end`, or where the partition ends (librdkafka's end-of-partition event, at the last stable
offset under read_committed): the plan's `end` was a last stable offset when it was planned, so every
committed record below it is in the log by then.

Records deleted before they were read (retention, a deleted segment) fail the read with
ReadDataLossError, as Spark's `failOnDataLoss` did: `auto.offset.reset=error` makes librdkafka say so
instead of jumping to another offset.
"""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

# The columns a check reads, in this order; `timestamp` in Kafka's own unit (ms since 1970 UTC), so
# that a timestamp no microsecond count can hold still arrives, and the check rejects its record.
RECORD_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("ms", tz="UTC")),
    ("kafka_headers", pa.string()),
]
RECORD_SCHEMA = pa.schema(RECORD_COLUMNS)

BATCH_RECORDS = 10_000  # records per Arrow batch, as Spark's maxRecordsPerBatch hands them
_NO_HEADERS = "[]"


class ReadDataLossError(RuntimeError):
    """Kafka deleted records of the planned ranges while the batch was being read."""


class ReadStalledError(RuntimeError):
    """Kafka sent nothing of a planned range for longer than the read allows; a retry may succeed."""


@dataclass(frozen=True)
class RangeToRead:
    """One planned range, as a task receives it."""

    topic: str
    partition: int
    start: int
    end: int  # exclusive
    batch_id: str


# librdkafka's settings for a range read; the user's configuration overrides any of them except the
# ones the read's correctness rests on (_FIXED).
_DEFAULTS = {
    # A range ends at a known offset, so a short broker-side wait costs no throughput, and a small
    # range is not held for the broker's default 500 ms.
    "fetch.wait.max.ms": 10,
    # librdkafka stops fetching while 100,000 records wait in its queue, then waits this long before it
    # fetches again (1 s by default): a task that checks while it reads would sit idle most of that.
    "fetch.queue.backoff.ms": 10,
}
_FIXED = {
    "group.id": "eosflow-range-read",  # never joined, never committed: the range is assigned
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
    "enable.partition.eof": True,  # where the partition ends is where a range of its tail ends
    "auto.offset.reset": "error",  # a deleted start is data loss, never a jump elsewhere
}


def consumer_config(kafka: Mapping[str, object]) -> dict[str, object]:
    return {**_DEFAULTS, **kafka, **_FIXED}


def read_range(
    kafka: Mapping[str, object],
    r: RangeToRead,
    batch_records: int = BATCH_RECORDS,
    stall_s: float = 120.0,
) -> Iterator[pa.RecordBatch]:
    """The committed records of `r`, in offset order, as Arrow batches of RECORD_COLUMNS.

    stall_s: how long the read waits while Kafka sends nothing (a broker restarting, a leader
    moving) before it fails with ReadStalledError; librdkafka reconnects by itself meanwhile.
    """
    from confluent_kafka import Consumer, TopicPartition

    if r.end <= r.start:
        return
    consumer = Consumer(consumer_config(kafka))
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        pending: list = []
        for records in _records(consumer, r, stall_s):
            pending += records
            if len(pending) >= batch_records:
                yield _batch(pending, r.topic, r.partition)
                pending = []
        if pending:
            yield _batch(pending, r.topic, r.partition)
    finally:
        consumer.close()


# How long one consume() waits for a full request: it returns as soon as the request is full, so this
# only bounds the wait at a range's end, where holes (markers, aborted records) leave it short.
_CONSUME_WAIT_S = 0.05
_CONSUME_MAX = 2_000


def _records(consumer, r: RangeToRead, stall_s: float) -> Iterator[list]:
    """The range's records in offset order, in the lists consume() hands them over."""
    from confluent_kafka import KafkaException

    at = r.start  # every offset below `at` is read (or a hole)
    idle_since = time.monotonic()
    ended_at = None  # where the partition last said it ends, if below the plan's end
    last_error = None  # the last passing error librdkafka reported, for a stalled read's message
    while at < r.end:
        messages = consumer.consume(num_messages=min(_CONSUME_MAX, r.end - at), timeout=_CONSUME_WAIT_S)
        if not messages:
            if time.monotonic() - idle_since > stall_s:
                raise ReadStalledError(_stalled(r, at, stall_s, ended_at, last_error))
            continue
        idle_since = time.monotonic()
        records = [m for m in messages if m.error() is None]
        if len(records) < len(messages):
            for m in messages:
                error = m.error()
                if error is None:
                    continue
                verdict = judge(error)
                if verdict == "end":
                    # At or past the plan's end: the rest of the range was aborted records or markers.
                    # Below it: a new leader whose high watermark has not caught up yet; wait for it.
                    if m.offset() >= r.end:
                        at = r.end
                    else:
                        ended_at = m.offset()
                elif verdict == "lost":
                    raise ReadDataLossError(
                        f"batch {r.batch_id}: Kafka deleted records of {r.topic}[{r.partition}] in the "
                        f"planned range [{r.start}, {r.end}) before they were read ({error.str()}). Nothing "
                        "was committed. This plan can never be read again: start a new run (new run id); "
                        "its plan will name the lost range, and --acknowledge-data-loss records it in the "
                        "ledger if the loss is accepted."
                    )
                elif verdict == "fail":
                    raise KafkaException(error)
                else:
                    last_error = error.str()  # librdkafka retries by itself; named if the read stalls
        if not records:
            continue
        if records[-1].offset() >= r.end:  # records at or past the end are the next run's
            offsets = [m.offset() for m in records]
            records, at = records[: bisect.bisect_left(offsets, r.end)], r.end
        if records:
            at = max(at, records[-1].offset() + 1)
            yield records


def _stalled(r: RangeToRead, at: int, stall_s: float, ended_at: int | None, last_error: str | None) -> str:
    why = (
        f"; the partition ends at offset {ended_at}, below the planned end: a leader still catching up, "
        "or records the plan saw are gone (an unclean leader election, the topic re-created)"
        if ended_at is not None
        else ""
    )
    said = f"; Kafka's last error: {last_error}" if last_error else ""
    return (
        f"batch {r.batch_id}: Kafka sent nothing more of {r.topic}[{r.partition}] for {stall_s:.0f} s "
        f"(read up to offset {at}, planned up to {r.end}{why}{said}). Nothing was committed; a retry "
        "reads the same range"
    )


def judge(error) -> str:
    """What a consumer error means for a range read: "end" (the partition's end), "lost" (records
    deleted before they were read), "fail" (no wait can help), or "wait". librdkafka reports a broker
    restarting or a leader moving as errors it retries by itself (`retriable()` is False for those
    too), so only a fatal error or a refused login or permission fails the read at once; a read that
    waits too long fails as stalled."""
    from confluent_kafka import KafkaError

    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        return "end"
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        return "lost"
    if error.fatal() or code in _REFUSED:
        return "fail"
    return "wait"


def _refused() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset(
        {
            KafkaError._AUTHENTICATION,
            KafkaError.SASL_AUTHENTICATION_FAILED,
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            KafkaError._SSL,
        }
    )


_REFUSED = _refused()


def _batch(records: list, topic: str, partition: int) -> pa.RecordBatch:
    n = len(records)
    headers = [m.headers() for m in records]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.key() for m in records], pa.binary()),
            pa.array([m.value() for m in records], pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array([m.offset() for m in records], pa.int64()),
            pa.array([m.timestamp()[1] for m in records], pa.int64()).view(RECORD_COLUMNS[5][1]),
            pa.array([_NO_HEADERS if h is None else headers_json(h) for h in headers], pa.string()),
        ],
        schema=RECORD_SCHEMA,
    )


def headers_json(headers: list[tuple[str, bytes | None]]) -> str:
    """A record's headers as the JSON array kafka_headers holds: [{"key": ..., "value": ...}], in
    order, duplicates kept; a value that is not UTF-8 is kept with U+FFFD in place of each invalid
    sequence (headers are kept, not validated), a header without a value as null."""
    return json.dumps(
        [{"key": k, "value": None if v is None else v.decode("utf-8", "replace")} for k, v in headers],
        ensure_ascii=False,
        separators=(",", ":"),
    )
