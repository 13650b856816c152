"""Reading topics back to their end with a plain consumer, read_committed by default: what a downstream
consumer sees. For checks (`eosflow verify` of a Kafka sink, a round trip) and for a publisher's
position; never for a pipeline's records, which Spark reads in planned ranges (read.py)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping


class ReadBackIncompleteError(TimeoutError):
    """A partition did not reach its end (Kafka stopped answering): nothing may be decided from the part
    read."""


def read_to_end(
    kafka: Mapping[str, str],
    starts: Iterable[tuple[str, int, int]],
    ends: Mapping[tuple[str, int], int] | None = None,
    isolation: str = "read_committed",
    idle_s: float = 30.0,
) -> Iterator:
    """The records of each (topic, partition) from its start offset (-2: the beginning) to the end a
    reader with `isolation` sees now, or to `ends` (exclusive). ReadBackIncompleteError, after the records
    read, if a partition is still short of its end after `idle_s` without progress: a position, a check or
    a count taken from part of a partition would be wrong, so the caller fails rather than decide."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **kafka,
            "group.id": "eosflow.verify",  # never commits: assign() and no offsets stored
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # A start below the log start (retention deleted it) reads from there, not from the end.
            "auto.offset.reset": "earliest",
            # A caught-up partition's end is known from a fetch that returns empty: do not let the broker
            # hold that fetch for its 500 ms default (a read-back of a small topic took 1.2 s, now 0.6 s).
            "fetch.wait.max.ms": 10,
        }
    )
    ends = ends or {}
    try:
        assignment = [TopicPartition(t, p, o) for t, p, o in starts]
        open_ = {(tp.topic, tp.partition) for tp in assignment}
        consumer.assign(assignment)
        idle_since = time.monotonic()
        while open_ and time.monotonic() - idle_since < idle_s:
            # A short wait: consume() returns early only once it has num_messages.
            batch = consumer.consume(5_000, timeout=0.2)
            for m in batch:
                key = (m.topic(), m.partition())
                if key not in open_:
                    continue
                error = m.error()
                # only an end-of-partition is progress; other errors repeat while they last
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_.discard(key)
                        idle_since = time.monotonic()
                    continue
                idle_since = time.monotonic()
                offset = m.offset()
                assert offset is not None  # a record's
                if key in ends and offset >= ends[key]:
                    open_.discard(key)
                    continue
                yield m
        if open_:
            raise ReadBackIncompleteError(
                f"reading {', '.join(f'{t}[{p}]' for t, p in sorted(open_))} back stopped short of the end: "
                f"no record and no end-of-partition for {idle_s:g} s (a broker paused, or the partition's "
                "leader is unavailable). Nothing was decided from the part read; retry when Kafka answers"
            )
    finally:
        consumer.close()


def records_at(
    kafka: Mapping[str, str],
    coordinates: Iterable[tuple[str, int, int]],
    isolation: str = "read_committed",
    idle_s: float = 30.0,
    seek_gap: int = 10_000,
) -> dict[tuple[str, int, int], tuple[bytes | None, bytes | None]]:
    """The key and value of the records at some (topic, partition, offset) coordinates: for the records a
    driver must quote, not for ranges. Each partition's offsets are read in order, consuming on through
    gaps of less than `seek_gap` records and seeking past longer ones. A coordinate that holds no record
    a reader with `isolation` sees (an aborted or compacted one) is left out. ReadBackIncompleteError when
    Kafka gives neither a record nor the partition's end for `idle_s`."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **kafka,
            "group.id": "eosflow.verify",  # never commits: assign() and no offsets stored
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    wanted: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in set(coordinates):
        wanted.setdefault((topic, partition), []).append(offset)
    found: dict[tuple[str, int, int], tuple[bytes | None, bytes | None]] = {}
    try:
        for (topic, partition), offsets in sorted(wanted.items()):
            pending = sorted(offsets)
            i, at = 0, None  # the next offset wanted; the offset the consumer reads next
            deadline = time.monotonic() + idle_s
            while i < len(pending):
                if at is None or pending[i] - at > seek_gap:
                    consumer.assign([TopicPartition(topic, partition, pending[i])])
                    at = pending[i]
                m = consumer.poll(0.2)
                if m is None or m.topic() != topic or m.partition() != partition:
                    if time.monotonic() > deadline:
                        raise ReadBackIncompleteError(
                            f"reading {topic}[{partition}]@{pending[i]} back: no record and no end-of-"
                            f"partition for {idle_s:g} s (a broker paused, or the partition's leader is "
                            "unavailable); retry when Kafka answers"
                        )
                    continue
                deadline = time.monotonic() + idle_s
                error = m.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break  # the rest hold no record
                    continue
                read = m.offset()
                assert read is not None  # a record's
                at = read + 1
                while i < len(pending) and pending[i] < read:
                    i += 1  # no record there (a transaction's marker, an aborted record)
                if i < len(pending) and pending[i] == read:
                    found[(topic, partition, read)] = (m.key(), m.value())
                    i += 1
    finally:
        consumer.close()
    return found


def partitions_of(kafka: Mapping[str, str], topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    found = AdminClient(dict(kafka)).list_topics(topic, timeout=30).topics.get(topic)
    return sorted(found.partitions) if found is not None and found.error is None else []
