"""`eosflow demo`: the main job end to end on the local stack.

Today: produce a transactional stream with some transactions aborted, then read it back with
read_committed and read_uncommitted consumers and reconcile both against the producer's manifest.
"""

from __future__ import annotations

import secrets
import time

from eosflow import stack
from eosflow.kafka_admin import ensure_topic
from eosflow.produce import events
from eosflow.produce.producer import Delivery, EventProducer, produce_stream
from eosflow.produce.readback import read_topic
from eosflow.produce.reconcile import reconcile
from eosflow.settings import Settings

TOPIC = "orders"
PARTITIONS = 6
COUNT = 20_000


def run(settings: Settings, log=print) -> int:
    stack.up(settings, log=log)
    seed = secrets.randbits(31)
    ensure_topic(settings.bootstrap_servers, TOPIC, PARTITIONS, log=log)
    delivery = Delivery(transactional_id=f"eosflow-demo-{seed}", txn_size=200, abort_ratio=0.2)
    log(
        f"producing {COUNT:,} events to {TOPIC} in transactions of {delivery.txn_size}, "
        f"{delivery.abort_ratio:.0%} of them aborted on purpose"
    )
    started = time.monotonic()
    producer = EventProducer(settings.bootstrap_servers, TOPIC, delivery, seed=seed)
    manifest = produce_stream(producer, events.generate(seed, COUNT), seed)
    path = manifest.write(settings.state_dir / "manifests" / f"demo-{seed}.json")
    produced_s = time.monotonic() - started

    committed = reconcile(manifest, read_topic(settings.bootstrap_servers, TOPIC, "read_committed"))
    uncommitted = reconcile(manifest, read_topic(settings.bootstrap_servers, TOPIC, "read_uncommitted"))
    counts = manifest.counts()
    aborted_seen = len(uncommitted.leaked)

    print()
    print(f"  topic {TOPIC}: {COUNT:,} events produced in {produced_s:.1f}s (manifest {path})")
    print(f"  {'':<22}{'committed':>12}{'aborted':>12}")
    print(f"  {'producer says':<22}{counts['committed']:>12,}{counts['aborted']:>12,}")
    print(f"  {'read_committed reads':<22}{committed.found:>12,}{len(committed.leaked):>12,}")
    print(f"  {'read_uncommitted reads':<22}{uncommitted.found:>12,}{aborted_seen:>12,}")
    print(f"  per partition (committed): {manifest.per_partition()}")
    ok = committed.ok and uncommitted.found == uncommitted.expected and aborted_seen == counts["aborted"]
    print(f"\n  read_committed: {committed.describe()}")
    print(f"  verdict: {'OK, exactly what the producer committed' if ok else 'MISMATCH'}\n")
    return 0 if ok else 1
