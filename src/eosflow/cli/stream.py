"""`eosflow stream`: its arguments, its signals and its exit codes (those of `eosflow ingest`)."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading

from eosflow import settings as settings_mod
from eosflow.runners.outcomes import EXIT, reported

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")


def duration(text: str) -> float:
    """Seconds from `2s`, `500ms`, `1m` or a bare number of seconds."""
    found = _DURATION.match(text)
    if found is None or float(found[1]) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration like 2s, 500ms or 1m, got {text!r}")
    return float(found[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[found[2]]


def duration_or_off(text: str) -> float | None:
    """A duration, or None for `off`."""
    return None if text.strip().lower() == "off" else duration(text)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pipeline", required=True, help="a pipeline named in pipelines.yml")
    p.add_argument(
        "--trigger",
        type=duration,
        default=2.0,
        metavar="DURATION",
        help="start a micro-batch this often (2s, 500ms, 1m; default 2s); at once while lag remains",
    )
    p.add_argument(
        "--max-batch-records",
        type=positive,
        default=None,
        metavar="N",
        help="at most N offsets per partition in one micro-batch (default: the pipeline's)",
    )
    p.add_argument(
        "--status-every",
        type=positive,
        default=10,
        metavar="N",
        help="a status line every N batches: records/s, latency p50/p95/p99, lag (default 10)",
    )
    p.add_argument("--max-batches", type=positive, default=None, metavar="N", help="stop after N batches")
    p.add_argument(
        "--max-seconds", type=duration, default=None, metavar="DURATION", help="stop after this long"
    )
    # fmt: skip

    p.add_argument(
        "--every-batch", action="store_true", help="a line per batch that read or committed anything"
    )
    p.add_argument(
        "--compact-every",
        type=duration_or_off,
        default=60.0,
        metavar="DURATION",
        help="merge the small pieces the stream's commits left in its target this often, on a thread beside "
        "the batches (default 1m; off: never, leaving it to eosflow compact)",
    )


def log(msg: str) -> None:
    print(f"eosflow stream: {msg}", file=sys.stderr, flush=True)


def execute(args: argparse.Namespace) -> int:
    from eosflow.runners.stream import StreamOptions, stream

    stop = threading.Event()

    def request_stop(signum, frame) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: abandon the batch in flight (nothing partial commits)
        log(f"{signal.Signals(signum).name}: finishing the batch in flight, then stopping")
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    options = StreamOptions(
        args.trigger,
        args.max_batch_records,
        args.status_every,
        args.max_batches,
        args.max_seconds,
        args.every_batch,
        args.compact_every,
    )
    from eosflow.observe.openlineage import pipeline_run, reporting

    settings = settings_mod.load()
    try:
        # One OpenLineage run for the stream's life, its micro-batches in summary (docs/DESIGN.md).
        with reporting(pipeline_run(settings, args.pipeline, "stream"), log) as completed:
            status = stream(settings, args.pipeline, options, stop, log)
            completed(status.summary(args.pipeline))
    except tuple(EXIT) as exc:
        code, line = reported(exc)
        log(line)
        return code
    except KeyboardInterrupt:
        log(
            "interrupted: the batch in flight was abandoned, nothing of it committed; the next start re-plans"
        )
        return 130
    return 0
