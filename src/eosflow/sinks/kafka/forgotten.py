"""When the consumer group forgets a partition's offset: restore it from the ledger, if that is safe.

Kafka removes a standalone group's committed offset of a partition `offsets.retention.minutes` (7 days
by default) after that partition's last commit, so a partition idle for a week loses it by itself; an
operator's cleanup of "inactive" groups removes every one. Without it a run's transaction finds no
offset where the plan expects the ledger's position, and would be fenced, run after run.

The ledger mirrors every range Kafka committed, so its position is where the offset stood, unless a
range committed in Kafka, its run died before the mirror, and then the offset was lost too. The output
tells those apart: every record names its source record (the eosflow-source-* headers). So for a
partition whose offset is gone and whose ledger holds position P, the output and dead-letter topics are
read (read_committed) from a while before the ledger's last commit of that partition; if no record there
comes from that partition at an offset >= P, P is committed again, in a transaction of the partition's
own transactional id (which fences any other holder first), and the run goes on. Otherwise nothing is
written and the run stops with LedgerBehindError, naming what it found.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

import psycopg

from eosflow.ledger import store
from eosflow.ledger.mirror import LedgerBehindError
from eosflow.sinks.kafka import ledger_mirror
from eosflow.sinks.kafka.output import output_of
from eosflow.sinks.kafka.produce import (
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
    commit_metadata,
    group_id,
    transactional_id,
)
from eosflow.sinks.protocol import Pipeline
from eosflow.sources.kafka.offsets import TopicMissingError, topic_id
from eosflow.sources.kafka.read_back import partitions_of, read_to_end

# How far before the ledger's last commit of a partition the output is searched: the records of a range
# are produced before its mirror commits, within one run (and a little clock skew between hosts).
LOOKBACK = timedelta(hours=1)
_TIMEOUT_S = 30.0


def restore(conn: psycopg.Connection, kafka: Mapping[str, str], pipeline: Pipeline, log=print) -> int:
    """Commit the ledger's position for every partition whose group offset is gone; returns how many."""
    restored = 0
    for topic in pipeline.topics:
        ledger = {p: o for p, o in store.positions(conn, pipeline.name, topic).items() if o is not None}
        if not ledger or _recreated(conn, kafka, pipeline.name, topic):
            continue  # a re-created topic's offsets went with the old one: the planner refuses it, saying so
        present = ledger_mirror.committed_offsets(kafka, pipeline.name, topic, sorted(ledger))
        for partition, position in sorted(ledger.items()):
            if partition in present:
                continue
            last = _last_commit(conn, pipeline.name, topic, partition)
            beyond = _produced_beyond(kafka, pipeline, topic, partition, position, last["at"])
            if beyond:
                raise LedgerBehindError(
                    f"pipeline {pipeline.name}: consumer group {group_id(pipeline.name)} has no committed "
                    f"offset for {topic}[{partition}], the ledger's position is {position}, and the output "
                    f"already holds {len(beyond)} record(s) from that partition at or beyond it (offsets "
                    f"{min(beyond)}..{max(beyond)}): a range committed in Kafka that the ledger never saw. "
                    "Nothing was written. Commit the group's offset past them by hand "
                    "(kafka-consumer-groups --reset-offsets --to-offset), or re-run into a new pipeline; see "
                    "docs/DESIGN.md, 'Kafka sinks'."
                )
            _commit(kafka, pipeline, topic, partition, position, last)
            log(
                f"consumer group {group_id(pipeline.name)} had forgotten its offset of "
                f"{topic}[{partition}] (Kafka drops a group's offsets offsets.retention.minutes after their "
                f"last commit, or it was deleted): restored {position} from the ledger; the output holds "
                "nothing from that partition beyond it"
            )
            restored += 1
    return restored


def _recreated(conn: psycopg.Connection, kafka: Mapping[str, str], pipeline: str, topic: str) -> bool:
    """The topic was deleted (and perhaps re-created): its positions count in an incarnation that is gone."""
    stored = {i for i in store.stored_topic_ids(conn, pipeline, topic).values() if i is not None}
    if not stored:
        return False
    try:
        current = topic_id(dict(kafka), topic, _TIMEOUT_S)
    except TopicMissingError:  # gone: the planner says so, with the fix
        return True
    return current not in stored


def _last_commit(conn: psycopg.Connection, pipeline: str, topic: str, partition: int) -> dict:
    row = conn.execute(
        "select batch_id, records_read, rows_written, rows_rejected, committed_at from eosflow.ledger "
        "where pipeline = %s and topic = %s and partition = %s order by end_offset desc, committed_at desc "
        "limit 1",
        (pipeline, topic, partition),
    ).fetchone()
    keys = ("batch", "read", "written", "rejected", "at")
    return dict(zip(keys, row, strict=True)) if row else dict.fromkeys(keys)


def _produced_beyond(
    kafka: Mapping[str, str],
    pipeline: Pipeline,
    topic: str,
    partition: int,
    position: int,
    since: datetime | None,
) -> list[int]:
    """Source offsets >= position of (topic, partition) named by the output's records since `since`."""
    from confluent_kafka import Consumer, TopicPartition

    sink = output_of(pipeline)
    outputs = [sink.output_topic, sink.dead_letter_topic]
    wanted = [
        TopicPartition(t, p, int((since - LOOKBACK).timestamp() * 1000) if since else -2)
        for t in outputs
        for p in partitions_of(kafka, t)
    ]
    if since is not None:
        consumer = Consumer(
            {**kafka, "group.id": f"{group_id(pipeline.name)}.restore", "enable.auto.commit": False}
        )
        try:
            wanted = consumer.offsets_for_times(wanted, _TIMEOUT_S)
        finally:
            consumer.close()
    starts = [(tp.topic, tp.partition, tp.offset) for tp in wanted if tp.offset != -1]  # -1: nothing since
    found = []
    for m in read_to_end(kafka, starts):
        h = dict(m.headers() or [])
        if h.get(SOURCE_TOPIC) == topic.encode() and h.get(SOURCE_PARTITION) == str(partition).encode():
            offset = int(h[SOURCE_OFFSET])
            if offset >= position:
                found.append(offset)
    return found


def _commit(
    kafka: Mapping[str, str], pipeline: Pipeline, topic: str, partition: int, position: int, last: dict
) -> None:
    """The offset again, in a transaction of the partition's own id: any other holder is fenced first."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({**kafka, "transactional.id": transactional_id(pipeline.name, topic, partition)})
    consumer = Consumer({**kafka, "group.id": group_id(pipeline.name), "enable.auto.commit": False})
    try:
        producer.init_transactions(_TIMEOUT_S)
        producer.begin_transaction()
        metadata = commit_metadata(
            last["batch"] or "", last["read"] or 0, last["written"] or 0, last["rejected"] or 0
        )
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, partition, position, metadata)],
            consumer.consumer_group_metadata(),
            _TIMEOUT_S,
        )
        producer.commit_transaction(_TIMEOUT_S)
    finally:
        consumer.close()
