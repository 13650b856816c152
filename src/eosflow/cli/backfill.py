"""`eosflow backfill`: validate an offset-range backfill, then run its chunks in order."""

from __future__ import annotations

import argparse
import sys

from eosflow import settings as settings_mod
from eosflow.ledger.backfill import MODES, BackfillError, BackfillRequest
from eosflow.observe.openlineage import pipeline_run, reporting
from eosflow.runners import backfill_run, job
from eosflow.runners.outcomes import EXIT, reported


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pipeline", required=True)
    p.add_argument(
        "--mode",
        choices=MODES,
        required=True,
        help="catch-up: forward from the stored position; replay: re-read committed offsets",
    )
    p.add_argument("--topic", default=None, help="the topic, for a pipeline reading several")
    p.add_argument("--partitions", default="all", help="all (default), or a list like 0,2")
    p.add_argument("--from-offset", type=int, default=None)
    p.add_argument("--to-offset", type=int, default=None, help="exclusive")
    p.add_argument("--from-time", default=None, help="ISO-8601 with zone, instead of --from-offset")
    p.add_argument("--to-time", default=None, help="ISO-8601 with zone, instead of --to-offset")
    p.add_argument("--chunk-size", type=int, default=100_000, help="offsets per chunk (default 100000)")
    p.add_argument("--run-id", default=None, help="reuse to retry a backfill: committed chunks are skipped")
    p.add_argument("--dry-run", action="store_true", help="validate and list the chunks, run nothing")


def execute(args: argparse.Namespace, settings: settings_mod.Settings | None = None) -> int:
    settings = settings or settings_mod.load()
    log = lambda msg: print(f"eosflow backfill: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        request = BackfillRequest(
            args.pipeline,
            args.mode,
            BackfillRequest.parse_partitions(args.partitions),
            args.from_offset,
            args.to_offset,
            args.chunk_size,
            topic=args.topic,
        )
        chunks = backfill_run.resolve(settings, request, args.from_time, args.to_time)
    except BackfillError as exc:
        code, line = reported(exc)  # REFUSED, exit 2
        log(line)
        return code
    log(f"{len(chunks)} chunk(s): " + ", ".join(str(c) for c in chunks))
    if args.dry_run:
        return 0
    run_id = args.run_id or job.new_run_id().replace("manual__", "backfill__")
    try:
        for i, chunk in enumerate(chunks, 1):
            log(f"chunk {i}/{len(chunks)}: {request.mode} {chunk}")
            # Each chunk is a run of its own (its batch, its commit): its own OpenLineage run too.
            with reporting(pipeline_run(settings, request.pipeline, "backfill"), log) as completed:
                summary = backfill_run.run_chunk(settings, request.pipeline, run_id, chunk, request.mode, log)
                completed(summary)
            print(summary.table(), flush=True)
    except tuple(EXIT) as exc:
        code, line = reported(exc)
        log(line)
        return code
    return 0
