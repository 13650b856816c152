"""`eosflow publish`: an outbox's committed rows into a Kafka topic, each batch with its position in one
Kafka transaction (docs/DESIGN.md, "Publishing").

Its loop, in the order that makes it exactly once:

1. `init_transactions` on the publisher's fixed transactional id (`eosflow.publish.<name>.<shard>`):
   an earlier publisher still alive (a zombie) is fenced, and its open transaction aborted;
2. only then the last committed position is read from the offsets topic;
3. per batch: the rows after the position whose transactions are all finished (outbox.py), produced
   with the new position in one transaction; a batch is at most `batch_rows` rows, and an empty
   batch makes no transaction. Idle, it polls every `batch_seconds`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psycopg

from eosflow.delivery import Delivery
from eosflow.faults import fault_point
from eosflow.kafka_admin import TopicLimits, topic_limits
from eosflow.ledger.migrate import migrate
from eosflow.publish import offsets as outbox_offsets
from eosflow.publish import outbox
from eosflow.publish import position as outbox_position
from eosflow.publish.declaration import Publisher
from eosflow.publish.outbox import OutboxRow
from eosflow.publish.position import Position
from eosflow.publish.row_format import row_encoder
from eosflow.rows import one_row
from eosflow.settings import Settings

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

Log = Callable[[str], None]
Encode = Callable[[OutboxRow], bytes]  # a row -> its record's value (eosflow.publish.row_format)
ROW_ID_HEADER, XID_HEADER = "eosflow-row-id", "eosflow-xid"
# A dead letter's coordinates and reason (the error header is the one the Kafka sink's dead letters carry).
TABLE_HEADER, ERROR_HEADER = "eosflow-table", "eosflow-error"
_TIMEOUT_S = 60.0
_RECORD_OVERHEAD = 512  # a record's framing beyond its key, value and headers, generously


class PublisherFencedError(RuntimeError):
    """A newer publisher of the same name took over: this one stopped, its open batch aborted."""


class PositionAheadError(RuntimeError):
    """The publisher's position names a transaction this warehouse has not reached: nothing was published."""


def _refuse_a_position_from_the_future(
    conn: psycopg.Connection, publisher: Publisher, current: Position | None
) -> None:
    """A warehouse restored from a backup rewinds its transaction counter: rows inserted after the restore
    get ids below the stored position and would be passed over, silently, until the counter caught up."""
    if current is None:
        return
    (next_xid,) = one_row(conn.execute("select pg_snapshot_xmax(pg_current_snapshot())::text::bigint"))
    if current.xid < next_xid:
        return
    reset = (
        f"delete the topic {publisher.offsets_topic}"
        if publisher.delivery == Delivery.EXACTLY_ONCE
        else f"delete its row of eosflow.publish_positions (publisher = '{publisher.name}')"
    )
    raise PositionAheadError(
        f"publisher {publisher.name}: its position (transaction {current.xid}, id {current.id}) is ahead of "
        f"this warehouse, whose next transaction id is {next_xid}: the warehouse was restored from a backup "
        "(or this is another database). Nothing was published: rows inserted since would have been passed "
        f"over. To start again from the outbox's first row, {reset}; consumers then see again the rows "
        "published before the restore"
    )


@dataclass
class PublishSummary:
    publisher: str
    started_at: Position | None = None
    position: Position | None = None
    transactions: int = 0
    rows: int = 0
    rejected: int = 0  # of `rows`: sent to the dead-letter topic, with the reason
    seconds: float = 0.0
    batches: list[int] = field(default_factory=list)

    def line(self) -> str:
        where = f"{self.position.xid}/{self.position.id}" if self.position else "nothing published yet"
        rate = f", {self.rows / self.seconds:,.0f} rows/s" if self.seconds and self.rows else ""
        rejected = f" ({self.rejected:,} rejected: see the dead-letter topic)" if self.rejected else ""
        return (
            f"publisher {self.publisher}: {self.rows:,} rows{rejected} in {self.transactions:,} transactions "
            f"({self.seconds:.1f} s{rate}); position {where}"
        )


def transactional_id(publisher: Publisher) -> str:
    return f"eosflow.publish.{publisher.name}.{publisher.shard}"


def publish(
    settings: Settings,
    publisher: Publisher,
    follow: bool = False,
    max_seconds: float | None = None,
    log: Log = print,
    should_stop: Callable[[], bool] = lambda: False,
) -> PublishSummary:
    """Publish what is committed now (or, `follow`, keep publishing until stopped or `max_seconds`)."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    started = time.monotonic()
    summary = PublishSummary(publisher.name)
    # eosflow's tables first: the outbox is recorded in eosflow.publishers (for the view's count of its
    # waiting rows), and an at_least_once publisher keeps its position in eosflow.publish_positions.
    migrate(settings.warehouse_dsn, log=log)
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        id_type = outbox.prepare(conn, publisher, log)
        outbox.configure_reads(conn)
        encode = row_encoder(conn, settings, publisher)  # a registered schema first: refused before any write
        outbox_offsets.ensure_topics(settings.kafka, publisher, log)
        limit = topic_limits(settings.kafka, [publisher.topic, publisher.rejected_topic])
        limit.refuse_a_compacted_dead_letter_topic(publisher.rejected_topic)
        failed = _Undelivered()
        exactly_once = publisher.delivery == Delivery.EXACTLY_ONCE
        config = {
            **settings.kafka,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            **limit.producer_config(),
        }
        if exactly_once:
            config["transactional.id"] = transactional_id(publisher)
        else:  # no transaction to fail: a record the broker refused must fail the batch before its position
            config["on_delivery"] = failed.record
        producer = Producer(config)
        if exactly_once:
            producer.init_transactions(_TIMEOUT_S)  # fences a zombie publisher, aborts its open batch
            current = outbox_offsets.read(settings.kafka, publisher)  # only after the fencing
        else:
            current = outbox_position.read_stored(conn, publisher)
        _refuse_a_position_from_the_future(conn, publisher, current)
        summary.started_at = current
        log(
            f"publisher {publisher.name}: from {current.xid}/{current.id}"
            if current
            else f"publisher {publisher.name}: first run, from the outbox's first committed row"
        )
        waiting = _Waiting(every_s=60.0 if follow else 0.0)
        try:
            while not should_stop():
                fault_point("publish_before_batch")
                rows = outbox.committed_after(conn, publisher, id_type, current, publisher.batch_rows)
                if not rows:
                    waiting.check(conn, publisher, current, log)
                    if not follow or (max_seconds is not None and time.monotonic() - started >= max_seconds):
                        break
                    time.sleep(publisher.batch_seconds)
                    continue
                if exactly_once:
                    current, rejected = _one_transaction(producer, publisher, rows, limit, encode)
                else:
                    current, rejected = _produce_then_store(
                        conn, producer, publisher, rows, limit, failed, encode
                    )
                if rejected:
                    log(
                        f"publisher {publisher.name}: {rejected} row(s) {publisher.format} cannot carry "
                        f"went to {publisher.rejected_topic} with the reason (header {ERROR_HEADER}); the "
                        f"rest to {publisher.topic}"
                    )
                summary.rejected += rejected
                summary.transactions += 1
                summary.rows += len(rows)
                summary.position = current
                fault_point("publish_after_commit")
                if max_seconds is not None and time.monotonic() - started >= max_seconds:
                    break
        except KafkaException as exc:
            if exc.args[0].code() in (
                KafkaError._FENCED,
                KafkaError.PRODUCER_FENCED,
                KafkaError.INVALID_PRODUCER_EPOCH,
            ):
                raise PublisherFencedError(
                    f"publisher {publisher.name} was fenced: another publisher of the same name initialised "
                    f"{transactional_id(publisher)} since this one started. Its open batch was aborted and "
                    "nothing of it is visible; the newer publisher continues from the committed position."
                ) from None
            raise
    summary.position = summary.position or current
    summary.seconds = time.monotonic() - started
    return summary


def _one_transaction(
    producer: Producer, publisher: Publisher, rows: list[OutboxRow], limit: TopicLimits, encode: Encode
) -> tuple[Position, int]:
    producer.begin_transaction()
    rejected = _produce_rows(producer, publisher, rows, limit, encode)
    last = outbox.position_of(rows[-1], publisher)
    _produce(producer, publisher.offsets_topic, outbox_offsets.key(publisher), last.to_json().encode(), None)
    producer.flush(_TIMEOUT_S)  # commit_transaction would flush them too: in the log, not yet visible
    fault_point("publish_in_transaction")  # records and position produced, the transaction open
    producer.commit_transaction(_TIMEOUT_S)
    return last, rejected


def _produce_then_store(
    conn: psycopg.Connection,
    producer: Producer,
    publisher: Publisher,
    rows: list[OutboxRow],
    limit: TopicLimits,
    failed: _Undelivered,
    encode: Encode,
) -> tuple[Position, int]:
    """at_least_once: the records, then the position in Postgres; a crash in between repeats them."""
    rejected = _produce_rows(producer, publisher, rows, limit, encode)
    remaining = producer.flush(_TIMEOUT_S)
    if remaining:
        raise TimeoutError(
            f"{remaining} records of publisher {publisher.name} not delivered in {_TIMEOUT_S:.0f}s"
        )
    if failed.error is not None:
        raise RuntimeError(
            f"publisher {publisher.name}: a record was not delivered ({failed.error.str()}); the position "
            "was not stored, so the next run publishes the batch again"
        )
    fault_point("publish_in_transaction")  # the records delivered, the position not stored
    last = outbox.position_of(rows[-1], publisher)
    outbox_position.store(conn, publisher, last)
    return last, rejected


class _Undelivered:
    """at_least_once: the first record the broker refused (delivery reports are served by flush)."""

    def __init__(self) -> None:
        self.error: KafkaError | None = None

    def record(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None and self.error is None:
            self.error = error


def _produce_rows(
    producer: Producer, publisher: Publisher, rows: list[OutboxRow], limit: TopicLimits, encode: Encode
) -> int:
    """Each row to the topic, or, if it cannot be published, to the dead-letter topic with the reason
    (in the same transaction; its value as JSON there, whatever the format); returns how many were
    rejected."""
    rejected = 0
    for row in rows:
        key, headers = outbox.row_key(row, publisher), _headers(row, publisher)
        value: bytes | None
        try:
            value = encode(row)
        except outbox.Unpublishable as exc:
            value, reason = outbox.rejected_value(row), str(exc)
        else:
            size = len(value) + len(key or b"") + sum(len(k) + len(v) for k, v in headers)
            keyless = limit.keyless_refused(publisher.topic) if key is None else None
            if keyless is not None:
                column = publisher.key_column or "none declared"
                reason = f"the row has no key (key column: {column}) and {keyless}"
            elif size <= limit.bytes - _RECORD_OVERHEAD:
                _produce(producer, publisher.topic, key, value, headers)
                continue
            else:
                value, reason = None, f"the row is {size:,} bytes as {publisher.format}, above {limit}"
        headers = [*headers, (TABLE_HEADER, publisher.table.encode()), (ERROR_HEADER, reason.encode())]
        _produce(producer, publisher.rejected_topic, key, value, headers)
        rejected += 1
    return rejected


def _headers(row: OutboxRow, publisher: Publisher) -> list[tuple[str, bytes]]:
    return [
        (ROW_ID_HEADER, outbox.position_of(row, publisher).id.encode()),
        (XID_HEADER, str(row[outbox.XID_COLUMN]).encode()),
    ]


def _produce(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None,
) -> None:
    while True:
        try:
            # list is invariant: confluent-kafka's stub wants (str, str | bytes | None) pairs, ours are bytes
            producer.produce(topic, value=value, key=key, headers=headers)  # type: ignore[arg-type]
            return
        except BufferError:
            producer.poll(0.1)


class _Waiting:
    """Says, at most every `every_s`, which open transactions hold committed rows back: a publisher
    waits, by design, for every older transaction of the whole cluster, and a forgotten one (a prepared
    transaction, a session idle in a transaction) would otherwise stall it without a word."""

    def __init__(self, every_s: float) -> None:
        self.every_s, self.said = every_s, -float("inf")

    def check(
        self, conn: psycopg.Connection, publisher: Publisher, current: Position | None, log: Log
    ) -> None:
        if time.monotonic() - self.said < self.every_s:
            return
        held = outbox.held_back(conn, publisher, current)
        if not held:
            return
        self.said = time.monotonic()
        blockers = outbox.blocking_transactions(conn)
        log(
            f"publisher {publisher.name}: {held:,} committed row(s) wait for older transactions to finish "
            f"(a row is published once every transaction older than it has ended): "
            + ("; ".join(blockers) or "none is open now (the next read takes them)")
            + ". End or commit a forgotten one (pg_terminate_backend(pid), COMMIT/ROLLBACK PREPARED 'gid')"
        )
