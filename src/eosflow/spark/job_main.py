"""The Spark job's entry: one ingestion run's arguments, summary and exit codes, the same for spark-submit
(eosflow/spark/task.py runs `main`) and for `eosflow ingest` (the CLI calls `add_arguments` and `execute`).

Exit codes: 0 committed or already committed; 2 bad configuration or input (a refused range, a
re-created topic); 3 fenced by another run; 4 data loss not acknowledged; 5 the batch did not add
up (nothing committed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from eosflow import settings as settings_mod
from eosflow.runners import backfill_run, database, job
from eosflow.runners.outcomes import EXIT, reported


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pipeline",
        required=True,
        help="a pipeline named in pipelines.yml (or a database entry: discovery, then every member)",
    )
    p.add_argument(
        "--run-id",
        default=None,
        help="the orchestrator's run id; the same id reuses the same plan (default: a new one)",
    )
    p.add_argument(
        "--max-records",
        type=int,
        default=None,
        help="at most this many offsets per partition in this run (default: the pipeline's)",
    )
    p.add_argument(
        "--range",
        type=parse_range,
        default=None,
        metavar="TOPIC:PARTITION:START-END",
        help="run one backfill chunk over exactly this range (with --mode)",
    )
    p.add_argument("--mode", choices=["catch-up", "replay"], default=None, help="with --range")
    p.add_argument(
        "--acknowledge-data-loss",
        action="store_true",
        help="accept records Kafka deleted before they were read; recorded as 'lost' ranges",
    )


def parse_range(text: str):
    """TOPIC:PARTITION:START-END, as backfill chunks are handed to the job."""
    from eosflow.ledger.ranges import OffsetRange

    try:
        topic, partition, span = text.rsplit(":", 2)
        start, end = span.split("-")
        return OffsetRange(topic, int(partition), int(start), int(end))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITION:START-END, got {text!r}") from None


PREFIX = "eosflow ingest: "  # how the job's lines begin, on stderr and in a task's log


def log(msg: str) -> None:
    print(f"{PREFIX}{msg}", file=sys.stderr, flush=True)


def execute(
    args: argparse.Namespace,
    settings: settings_mod.Settings | None = None,
    say: Callable[[str], None] = log,
    lineage: bool = False,
) -> int:
    """One run; returns its exit code. say: where its lines go (stderr, or an Airflow task's log).
    lineage: report it as OpenLineage events when the client is configured (the CLI's runs; Airflow's
    report through Airflow's OpenLineage provider)."""
    settings = settings or settings_mod.load()
    if args.range is not None and (args.mode is None or args.run_id is None):
        say("--range needs --mode and --run-id")
        return 2  # refused before a run begins: no lineage either
    from eosflow.observe.openlineage import pipeline_run, reporting

    run = pipeline_run(settings, args.pipeline, "backfill" if args.range is not None else "ingest")
    try:
        with reporting(run, say, enabled=lineage) as completed:
            if args.range is not None:
                summary = backfill_run.run_chunk(
                    settings, args.pipeline, args.run_id, args.range, args.mode, say
                )
            elif (entry := database.database_entry(settings, args.pipeline)) is not None:
                # Each member is a run of its own, in OpenLineage too; the entry reads and writes nothing.
                def member(name: str) -> AbstractContextManager[Callable[[Any], None]]:
                    return reporting(pipeline_run(settings, name, "ingest"), say, enabled=lineage)

                done = database.run(
                    settings, entry, args.run_id, args.max_records, args.acknowledge_data_loss, say, member
                )
                print(done.table(), flush=True)
                return done.exit_code
            else:
                summary = job.run(
                    settings, args.pipeline, args.run_id, args.max_records, args.acknowledge_data_loss, say
                )
            completed(summary)
    except tuple(EXIT) as exc:
        code, line = reported(exc)
        say(line)
        return code
    print(summary.table(), flush=True)
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ingest_job", description="one eosflow ingestion run")
    add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return execute(parse(sys.argv[1:] if argv is None else argv))
