"""The producer side of Kafka's guarantees, on confluent-kafka.

Three ways to write, as Kafka offers them:
- acks 0, 1 or all, with the idempotent producer on or off;
- transactions: records grouped into transactions that span partitions, some deliberately
  aborted; a second producer with the same transactional.id fences the first.
Every record ends in the manifest with its partition, offset and fate.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer

from eosflow.kafka_client import KafkaConfig
from eosflow.kafka_client import client_config as kafka_client_config
from eosflow_dev.produce.events import Event
from eosflow_dev.produce.manifest import EventRow, Manifest


class DeliveryConfigError(ValueError):
    """Delivery settings that Kafka would refuse or that contradict each other."""


class ProducerFenced(RuntimeError):
    """Another producer with our transactional.id has started; this one may never write again."""


@dataclass(frozen=True)
class Delivery:
    acks: str = "all"  # "0", "1" or "all"
    idempotence: bool = True
    transactional_id: str | None = None
    txn_size: int = 100  # records per transaction
    abort_ratio: float = 0.0  # share of transactions deliberately aborted
    extra: dict[str, str] = field(default_factory=dict)  # passed through to librdkafka

    def validate(self) -> None:
        if self.acks not in ("0", "1", "all"):
            raise DeliveryConfigError(f"acks must be 0, 1 or all, not {self.acks!r}")
        if self.idempotence and self.acks != "all":
            raise DeliveryConfigError(
                f"the idempotent producer needs acks=all (Kafka's rule); got acks={self.acks}. "
                "Use --acks all, or --no-idempotence to study acks 0 and 1."
            )
        if self.transactional_id is not None and not self.idempotence:
            raise DeliveryConfigError("transactions need the idempotent producer; drop --no-idempotence")
        if self.txn_size < 1:
            raise DeliveryConfigError(f"--txn-size must be at least 1, not {self.txn_size}")
        if not 0.0 <= self.abort_ratio <= 1.0:
            raise DeliveryConfigError(f"--abort-ratio must be between 0 and 1, not {self.abort_ratio}")
        if self.abort_ratio and self.transactional_id is None:
            raise DeliveryConfigError("--abort-ratio needs --transactional-id: only transactions can abort")

    def client_config(self, kafka: str | KafkaConfig) -> dict[str, object]:
        """The producer's configuration: the Kafka client configuration (a bootstrap string or the
        whole map, eosflow.kafka_client) with this delivery's settings on top."""
        self.validate()
        conf: dict[str, object] = {
            **kafka_client_config(kafka),
            "acks": self.acks,
            "enable.idempotence": self.idempotence,
            "linger.ms": 5,
            "compression.type": "lz4",
        }
        if self.transactional_id is not None:
            conf["transactional.id"] = self.transactional_id
        conf.update(self.extra)
        return conf


Progress = Callable[[int, Manifest], None]


class EventProducer:
    """Writes events under one Delivery setting and records each record's fate in a Manifest."""

    def __init__(
        self, bootstrap: str | KafkaConfig, topic: str, delivery: Delivery, seed: int | None = None
    ) -> None:
        self.topic = topic
        self.delivery = delivery
        self.manifest = Manifest(topic, asdict(delivery) | {"seed": seed})
        self._producer = Producer(delivery.client_config(bootstrap))
        self._txn = -1
        self._fenced = False
        if delivery.transactional_id is not None:
            self._call(self._producer.init_transactions, 30)

    # -- non-transactional -------------------------------------------------------------------------
    def send(self, events: Iterable[Event]) -> None:
        """Produce without transactions; fates arrive through delivery reports."""
        for event in events:
            self._produce(event, self._row(event, -1))
        self._producer.flush()

    # -- transactional -----------------------------------------------------------------------------------
    def send_transaction(self, events: Iterable[Event], abort: bool = False) -> str:
        """One transaction across whatever partitions the keys land on; returns its fate."""
        if self.delivery.transactional_id is None:
            raise DeliveryConfigError("send_transaction needs a transactional_id")
        self._txn += 1
        rows: list[EventRow] = []
        try:
            self._call(self._producer.begin_transaction)
            for event in events:
                rows.append(self._row(event, self._txn))
                self._produce(event, rows[-1])
            if abort:
                # Flush first: aborting with records in flight races AddPartitionsToTxn and fails
                # fatally with INVALID_TXN_STATE (librdkafka #4849). Flushed, the aborted records
                # are really in the log, which is what read_uncommitted readers must see.
                self._call(self._producer.flush, 30)
                self._call(self._producer.abort_transaction, 30)
                fate = "aborted"
            else:
                self._call(self._producer.commit_transaction, 30)
                fate = "committed"
        except ProducerFenced:
            for row in rows:
                row.status = "fenced"
            raise
        except KafkaException as exc:
            # Not fenced, but the transaction cannot commit: abort it so none of it becomes visible.
            if exc.args[0].txn_requires_abort():
                self._call(self._producer.abort_transaction, 30)
                fate = "aborted"
            else:
                raise
        for row in rows:
            row.status = fate if row.status != "failed" else "failed"
        return fate

    def close(self) -> None:
        if not self._fenced:
            self._producer.flush(30)

    # -- internals -------------------------------------------------------------------------------------
    def _row(self, event: Event, txn: int) -> EventRow:
        row = EventRow(event.event_id, -1, -1, "pending", txn)
        self.manifest.rows.append(row)
        return row

    def _produce(self, event: Event, row: EventRow) -> None:
        acks_zero = self.delivery.acks == "0"

        def on_delivery(err: KafkaError | None, msg) -> None:
            if err is not None:
                row.status = "failed"
                return
            row.partition = msg.partition()
            row.offset = msg.offset()
            if row.txn < 0:
                row.status = "sent" if acks_zero else "acknowledged"

        while True:
            try:
                self._call(
                    self._producer.produce,
                    self.topic,
                    value=event.value,
                    key=event.key,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain
        self._producer.poll(0)

    def _call(self, fn, *args, **kwargs):
        if self._fenced:
            # librdkafka is in a fatal state after fencing; every later call would fail confusingly.
            raise ProducerFenced(self._fenced_message("this producer was fenced earlier"))
        try:
            return fn(*args, **kwargs)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError._FENCED or (err.fatal() and "fenced" in err.str().lower()):
                self._fenced = True
                raise ProducerFenced(self._fenced_message(err.str())) from exc
            raise

    def _fenced_message(self, detail: str) -> str:
        return (
            f"producer with transactional.id {self.delivery.transactional_id!r} was fenced: another "
            f"producer with the same id has started, so this one stops. Its open transaction is "
            f"aborted and none of its records become visible. ({detail})"
        )


def produce_stream(
    producer: EventProducer,
    events: Iterable[Event],
    seed: int,
    progress: Progress | None = None,
    progress_every_s: float = 2.0,
) -> Manifest:
    """Drive a whole run: transactions of txn_size (some aborted) or a plain stream."""
    delivery = producer.delivery
    rng = random.Random(seed ^ 0x5EED)  # abort decisions: reproducible, independent of event content
    started = last_report = time.monotonic()
    batch: list[Event] = []

    def report(force: bool = False) -> None:
        nonlocal last_report
        if progress is not None and (force or time.monotonic() - last_report >= progress_every_s):
            progress(len(producer.manifest.rows), producer.manifest)
            last_report = time.monotonic()

    try:
        if delivery.transactional_id is None:
            for event in events:
                batch.append(event)
                if len(batch) >= 1000:
                    producer.send(batch)
                    batch = []
                    report()
            producer.send(batch)
        else:
            for event in events:
                batch.append(event)
                if len(batch) >= delivery.txn_size:
                    producer.send_transaction(batch, abort=rng.random() < delivery.abort_ratio)
                    batch = []
                    report()
            if batch:
                producer.send_transaction(batch, abort=rng.random() < delivery.abort_ratio)
    finally:
        producer.close()
        elapsed = time.monotonic() - started
        producer.manifest.summary_extra["elapsed_s"] = round(elapsed, 3)
        producer.manifest.summary_extra["records_per_s"] = (
            round(len(producer.manifest.rows) / elapsed, 1) if elapsed > 0 else None
        )
        report(force=True)
    return producer.manifest
