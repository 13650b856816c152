"""`eosflow produce`: arguments, progress lines and the manifest, around produce_stream()."""

from __future__ import annotations

import argparse
import secrets
from datetime import UTC, datetime
from pathlib import Path

from eosflow.kafka_admin import ensure_topic
from eosflow_dev.produce import events
from eosflow_dev.produce.manifest import Manifest
from eosflow_dev.produce.producer import (
    Delivery,
    DeliveryConfigError,
    EventProducer,
    ProducerFenced,
    produce_stream,
)
from eosflow_dev.stack.settings import StackSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", default="orders", help="topic to write (default: orders)")
    p.add_argument(
        "--partitions",
        type=int,
        default=6,
        help="create the topic with this many partitions, or grow it to them (default: 6)",
    )
    p.add_argument("--count", type=int, default=10_000, help="events to produce (default: 10000)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="makes the stream reproducible; default: random (recorded in the manifest)",
    )
    p.add_argument("--acks", choices=["0", "1", "all"], default="all", help="producer acks (default: all)")
    p.add_argument(
        "--no-idempotence",
        dest="idempotence",
        action="store_false",
        help="turn the idempotent producer off (needed for acks 0 or 1)",
    )
    p.add_argument(
        "--transactional-id", default=None, help="write in transactions under this transactional.id"
    )
    p.add_argument("--txn-size", type=int, default=100, help="records per transaction (default: 100)")
    p.add_argument(
        "--abort-ratio",
        type=float,
        default=0.0,
        help="share of transactions deliberately aborted, 0..1 (default: 0)",
    )
    p.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help="where to write the manifest (default: .stack/manifests/<topic>-<time>.json)",
    )
    p.add_argument(
        "-X",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka producer setting, repeatable (e.g. -X linger.ms=20)",
    )


def run(args: argparse.Namespace, settings: StackSettings, log=print) -> int:
    extra = {}
    for item in args.extra:
        key, sep, value = item.partition("=")
        if not sep:
            log(f"error: -X expects KEY=VALUE, got {item!r}")
            return 2
        extra[key] = value
    delivery = Delivery(
        args.acks, args.idempotence, args.transactional_id, args.txn_size, args.abort_ratio, extra
    )
    try:
        delivery.validate()
    except DeliveryConfigError as exc:
        log(f"error: {exc}")
        return 2
    if args.count < 0 or args.partitions < 1:
        log("error: --count must be >= 0 and --partitions >= 1")
        return 2

    seed = args.seed if args.seed is not None else secrets.randbits(31)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    manifest_path = args.manifest or settings.state_dir / "manifests" / f"{args.topic}-{stamp}.json"
    ensure_topic(settings.kafka, args.topic, args.partitions, log=log)
    mode = (
        f"transactions of {delivery.txn_size}, {delivery.abort_ratio:.0%} aborted"
        if delivery.transactional_id
        else f"acks={delivery.acks}, idempotence {'on' if delivery.idempotence else 'off'}"
    )
    log(f"producing {args.count:,} events to {args.topic} ({mode}, seed {seed})")

    def progress(done: int, manifest: Manifest) -> None:
        c = manifest.counts()
        pct = done / args.count if args.count else 1.0
        log(
            f"produce: {done:,}/{args.count:,} ({pct:.0%}) committed {c['committed']:,} "
            f"aborted {c['aborted']:,} acknowledged {c['acknowledged']:,} failed {c['failed']:,}"
        )

    producer = EventProducer(settings.kafka, args.topic, delivery, seed=seed)
    code = 0
    try:
        manifest = produce_stream(producer, events.generate(seed, args.count), seed, progress)
    except ProducerFenced as exc:
        log(f"error: {exc}")
        manifest, code = producer.manifest, 3
    manifest.write(manifest_path)
    counts = manifest.counts()
    summary = ", ".join(f"{k} {v:,}" for k, v in counts.items() if v)
    log(f"done: {summary or 'nothing'}; manifest {manifest_path}")
    print(manifest_path)
    return code
