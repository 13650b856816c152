"""Load the bench topic: N order events in Kafka transactions, and the same rows as a COPY file.

The events are `eosflow produce`'s (JSON of about 200 bytes, keyed by customer), written by its
transactional producer, so every reader sees the transaction markers and holes a real topic has.
The producer's manifest says where each event landed, which lets the write ceiling COPY exactly the
rows eosflow's target would hold, without reading the topic back.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from eosflow.kafka_admin import ensure_topic
from eosflow_dev.bench.targets import COLUMNS
from eosflow_dev.produce import events
from eosflow_dev.produce.manifest import Manifest
from eosflow_dev.produce.producer import Delivery, EventProducer, produce_stream
from eosflow_dev.stack.settings import StackSettings

Log = Callable[[str], None]
TXN_SIZE = 1000  # records per producer transaction


class LoadError(RuntimeError):
    """The topic does not hold exactly the records the bench asked for."""


@dataclass(frozen=True)
class Workload:
    """What was loaded: every measurement of a run reads this topic and must move `records` rows."""

    topic: str
    partitions: int
    records: int
    payload_bytes: int  # keys + values, the bytes every reader moves
    seed: int
    load_s: float
    copy_file: Path | None = None  # the rows as eosflow's target holds them, CSV, for the write ceiling

    @property
    def payload_mb(self) -> float:
        return self.payload_bytes / 1_000_000


def load_topic(
    settings: StackSettings,
    topic: str,
    partitions: int,
    records: int,
    seed: int,
    copy_file: Path | None,
    log: Log,
) -> Workload:
    """Create `topic` and write `records` events to it in committed transactions of TXN_SIZE."""
    if records < 1 or partitions < 1:
        raise ValueError(f"need records >= 1 and partitions >= 1, got {records} and {partitions}")
    ensure_topic(settings.bootstrap_servers, topic, partitions, log=lambda msg: None)
    delivery = Delivery(transactional_id=f"eosflow-bench-{topic}", txn_size=TXN_SIZE)
    producer = EventProducer(settings.bootstrap_servers, topic, delivery, seed=seed)
    size = [0]

    def counted(stream: Iterator[events.Event]) -> Iterator[events.Event]:
        for event in stream:
            size[0] += len(event.key) + len(event.value)
            yield event

    def progress(done: int, manifest: Manifest) -> None:
        log(f"  load: {done:,}/{records:,} ({done / records:.0%})")

    started = time.monotonic()
    manifest = produce_stream(
        producer, counted(events.generate(seed, records)), seed, progress, progress_every_s=10.0
    )
    load_s = time.monotonic() - started
    counts = manifest.counts()
    if counts["committed"] != records:
        raise LoadError(
            f"loading {topic}: {counts['committed']:,} of {records:,} records committed ({counts}); "
            "is the broker healthy? see `eosflow stack logs kafka`"
        )
    if copy_file is not None:
        write_copy_file(topic, seed, manifest, copy_file)
    return Workload(topic, partitions, records, size[0], seed, load_s, copy_file)


def write_copy_file(topic: str, seed: int, manifest: Manifest, path: Path) -> None:
    """The loaded rows as CSV in COLUMNS' order, as eosflow's transform would write them.

    The events are generated again from the seed (the generator is deterministic) and paired with
    the manifest's rows, which are in production order. The producer's timestamps are not recorded,
    so kafka_timestamp takes the event time: same type and size, which is what COPY's cost depends on.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        for event, row in zip(events.generate(seed, len(manifest.rows)), manifest.rows, strict=True):
            if event.event_id != row.event_id:
                raise LoadError(f"manifest and regenerated events disagree at {row.event_id}")
            body = json.loads(event.value)
            values = body | {
                "kafka_topic": topic,
                "kafka_partition": row.partition,
                "kafka_offset": row.offset,
                "kafka_timestamp": body["event_time"],
                "kafka_key": event.key.decode(),
                "kafka_headers": "[]",
                "batch_id": "bench-copy",
                "transform_version": "v1",
            }
            out.writerow([values[column] for column in COLUMNS])
