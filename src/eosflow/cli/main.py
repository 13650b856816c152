"""The `eosflow` command: one entry point, one subcommand per job."""

from __future__ import annotations

import argparse
import gc
import sys
from importlib.metadata import entry_points
from pathlib import Path

from eosflow import settings as settings_mod
from eosflow.errors import PipelineConfigError, StackError

# Subcommands added by installed packages: each entry point is a callable taking the subparsers. eosflow-dev
# (dev/) adds the dev tools' there (stack, produce, demo, lab, bench, airflow, spark-cluster).
COMMANDS_GROUP = "eosflow.commands"


def _log(msg: str) -> None:
    print(f"eosflow: {msg}", file=sys.stderr, flush=True)


def _error(exc: Exception) -> None:
    """An error eosflow raised, with where its cause and fix are written down."""
    from eosflow.runners.outcomes import entry

    _log(f"error: {exc} ({entry(exc)})")


def cmd_ingest(args: argparse.Namespace) -> int:
    from eosflow.spark.job_main import execute

    return execute(args, settings_mod.load(), lineage=True)  # Airflow's tasks report through its provider


def cmd_stream(args: argparse.Namespace) -> int:
    from eosflow.cli.stream import execute

    return execute(args)


def cmd_backfill(args: argparse.Namespace) -> int:
    from eosflow.cli.backfill import execute

    return execute(args, settings_mod.load())


def cmd_discover(args: argparse.Namespace) -> int:
    from eosflow.runners import database

    settings = settings_mod.load()
    try:
        entry = database.database_entry(settings, args.pipeline)
        if entry is None:
            raise PipelineConfigError(
                f"{args.pipeline!r} is not a database entry of the pipelines file (an entry with database:)"
            )
        _, members = database.discover_members(settings, entry, print)
    except PipelineConfigError as exc:
        _error(exc)
        return 2
    print(f"{args.pipeline}: {len(members)} members: {', '.join(members) or '(none yet)'}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from eosflow.pipelines import PipelineConfigError
    from eosflow.verify import verify_pipeline

    try:
        result = verify_pipeline(settings_mod.load(), args.pipeline)
    except PipelineConfigError as exc:
        _error(exc)
        return 2
    print(result.table())
    return 0 if result.ok else 1


def cmd_kafka(args: argparse.Namespace) -> int:
    """A Kafka sink's open transactions: which output partitions they hold back; --abort ends them."""
    from eosflow import pipelines

    settings = settings_mod.load()
    try:
        pipeline = pipelines.load(settings, args.pipeline)
    except pipelines.PipelineConfigError as exc:
        _error(exc)
        return 2
    held = pipeline.sink.open_transactions(settings, pipeline, args.abort, _log)
    if held is None:
        _log(
            f"error: pipeline {pipeline.name!r} writes to {pipeline.sink.output}, not to Kafka: it has no "
            "transactions"
        )
        return 2
    if not held:
        print(f"pipeline {pipeline.name}: no open transaction holds back its output topics")
        return 0
    print(f"pipeline {pipeline.name}: {len(held)} output partition(s) held back by an open transaction")
    for h in held:
        print(f"  {h}")
    print(
        "A run in progress holds its transactions open until it commits. One left by a killed run is aborted "
        "by the next run, by the broker after transaction_timeout_ms, or now by: "
        f"eosflow kafka transactions --pipeline {pipeline.name} --abort"
    )
    return 1


def cmd_publish(args: argparse.Namespace) -> int:
    """An outbox's committed rows into Kafka, with their position in the same transactions."""
    import signal

    from eosflow.pipelines import PipelineConfigError
    from eosflow.publish.declaration import load_publisher
    from eosflow.publish.run import PositionAheadError, PublisherFencedError, publish
    from eosflow.sources.kafka.read_back import ReadBackIncompleteError

    settings = settings_mod.load()
    try:
        publisher = load_publisher(settings, args.pipeline)
    except PipelineConfigError as exc:
        _error(exc)
        return 2
    stop = []
    # SIGTERM ends the loop between batches: the batch in flight commits or was never begun.
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    from eosflow.observe.openlineage import PublishLineage, reporting

    try:
        with reporting(lambda: PublishLineage(settings, publisher), _log) as completed:
            summary = publish(
                settings,
                publisher,
                follow=args.follow,
                max_seconds=args.max_seconds,
                log=_log,
                should_stop=lambda: bool(stop),
            )
            completed(summary)
    except PipelineConfigError as exc:
        _error(exc)
        return 2
    except PublisherFencedError as exc:
        _error(exc)
        return 3
    except PositionAheadError as exc:  # a restored warehouse: an operator decides, nothing was published
        _error(exc)
        return 2
    except ReadBackIncompleteError as exc:  # its position could not be read whole: nothing was published
        _error(exc)
        return 1
    except KeyboardInterrupt:
        _log("interrupted: the batch in flight was not committed and will be published by the next run")
        return 130
    print(summary.line())
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    """Merge adjacent committed children of partitioned targets (every pipeline, or those named)."""
    import psycopg

    from eosflow.ledger.migrate import migrate
    from eosflow.pipelines import PipelineConfigError, load_all

    s = settings_mod.load()
    try:
        found = load_all(s)
    except PipelineConfigError as exc:
        _error(exc)
        return 2
    if unknown := sorted(set(args.pipeline or ()) - set(found)):
        _log(f"error: unknown pipeline(s) {unknown}; pipelines.yml declares {sorted(found)}")
        return 2
    migrate(s.warehouse_dsn, log=_log)
    with psycopg.connect(s.warehouse_dsn, autocommit=True) as conn:
        for name in args.pipeline or sorted(found):
            pipeline = found[name]
            summary = pipeline.sink.compact(conn, pipeline, args.target_rows, _log)
            if summary is not None:
                print(summary.line(), flush=True)
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    """Migrate an exactly-once target made before partitioned targets."""
    import psycopg

    from eosflow.ledger.migrate import migrate
    from eosflow.pipelines import PipelineConfigError, load
    from eosflow.sinks.postgres.repartition import RepartitionError, repartition

    s = settings_mod.load()
    try:
        pipeline = load(s, args.pipeline)
        migrate(s.warehouse_dsn, log=_log)
        with psycopg.connect(s.warehouse_dsn, autocommit=True) as conn:
            repartition(conn, pipeline, log=_log)
    except (PipelineConfigError, RepartitionError) as exc:
        _error(exc)
        return 2
    return 0


def cmd_jars(args: argparse.Namespace) -> int:
    """`eosflow jars fetch|check`: exit 0 when the folder holds exactly the lock's jars, 1 when not."""
    from eosflow.spark import jars

    settings = settings_mod.load()
    try:
        if args.jars_command == "fetch":
            jars.fetch(args.dir or jars.folder(settings), args.repository, log=print)
        else:
            found = jars.check(settings)
            print(f"Spark's jars in {jars.folder(settings)}: the {len(found)} the lock names, each as locked")
    except StackError as exc:
        _error(exc)
        return 1
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from eosflow.observe.exporter import serve

    host, _, port = args.listen.rpartition(":")
    if not port.isdigit() or not host:
        _log(
            f"--listen {args.listen!r}: give host:port, e.g. 127.0.0.1:9464 "
            "(0.0.0.0:9464 for every interface)"
        )
        return 2
    return serve(settings_mod.load(), host, int(port), log=_log)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eosflow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    from eosflow.spark.job_main import add_arguments as add_ingest_arguments

    p = sub.add_parser("ingest", help="one exactly-once ingestion run of a pipeline (plan, read, commit)")
    add_ingest_arguments(p)
    p.set_defaults(func=cmd_ingest)

    from eosflow.cli.stream import add_arguments as add_stream_arguments

    p = sub.add_parser(
        "stream", help="micro-batches through the same ledger in one long-running Spark (SIGTERM stops it)"
    )
    add_stream_arguments(p)
    p.set_defaults(func=cmd_stream)

    from eosflow.cli.backfill import add_arguments as add_backfill_arguments

    p = sub.add_parser("backfill", help="catch up or replay an offset range, validated first, in chunks")
    add_backfill_arguments(p)
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser(
        "discover",
        help="a database entry's tables found in Kafka, their columns read from Debezium's schema block",
    )
    p.add_argument("--pipeline", required=True, help="a database entry named in pipelines.yml")
    p.set_defaults(func=cmd_discover)

    p = sub.add_parser("verify", help="dbt build: the invariants I1-I6 and the marts of one pipeline")
    p.add_argument("--pipeline", required=True, help="a pipeline named in pipelines.yml")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("publish", help="an outbox table's committed rows into Kafka, exactly once")
    p.add_argument("--pipeline", required=True, help="a publisher named under publishers: in pipelines.yml")
    p.add_argument(
        "--follow", action="store_true", help="keep publishing new rows until stopped (SIGTERM, Ctrl-C)"
    )
    p.add_argument("--max-seconds", type=float, default=None, help="stop after this long (with --follow)")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("kafka", help="a Kafka sink's transactions: list those left open, abort them")
    kafka_sub = p.add_subparsers(dest="kafka_command", required=True)
    k = kafka_sub.add_parser("transactions", help="output partitions held back by an open transaction")
    k.add_argument("--pipeline", required=True, help="a pipeline with sink: kafka")
    k.add_argument(
        "--abort",
        action="store_true",
        help="re-initialise the pipeline's transactional ids first: aborts what they left open (do not run "
        "it while a run of the pipeline is in progress: that run is fenced and fails)",
    )
    k.set_defaults(func=cmd_kafka)

    from eosflow.sinks.postgres.compact import DEFAULT_TARGET_ROWS

    p = sub.add_parser("compact", help="merge adjacent committed children of the partitioned targets")
    p.add_argument("--pipeline", action="append", help="only this pipeline (repeatable; default: all)")
    p.add_argument(
        "--target-rows",
        type=int,
        default=DEFAULT_TARGET_ROWS,
        help=f"merge into children of at most this many rows (default {DEFAULT_TARGET_ROWS:,})",
    )
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("partition", help="migrate an exactly-once target made before partitioned targets")
    p.add_argument("--pipeline", required=True, help="a pipeline named in pipelines.yml")
    p.set_defaults(func=cmd_partition)

    from eosflow.spark.jars import MAVEN_CENTRAL

    p = sub.add_parser("jars", help="Spark's jars beyond pyspark's own, fetched and checked against the lock")
    jars_sub = p.add_subparsers(dest="jars_command", required=True)
    j = jars_sub.add_parser(
        "fetch", help="download the locked jars into EOSFLOW_JARS_DIR/spark, each checked by its SHA-256"
    )
    j.add_argument(
        "--repository",
        default=MAVEN_CENTRAL,
        help="a repository in Maven's layout: a mirror's https:// URL, or file:// (default Maven Central)",
    )
    j.add_argument(
        "--dir", type=Path, help="the jars folder (default EOSFLOW_JARS_DIR/spark, which Spark reads)"
    )
    j.set_defaults(func=cmd_jars)
    j = jars_sub.add_parser("check", help="the jars folder against the lock (what every Spark start checks)")
    j.set_defaults(func=cmd_jars)

    p = sub.add_parser(
        "metrics",
        help="the pipelines' Prometheus metrics without an Airflow login (what /eosflow/metrics serves)",
    )
    p.add_argument(
        "--listen", default="127.0.0.1:9464", help="host:port to serve /metrics on (default 127.0.0.1:9464)"
    )
    p.set_defaults(func=cmd_metrics)

    for entry in entry_points(group=COMMANDS_GROUP):  # the dev tools' (eosflow-dev), or a package's
        entry.load()(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except StackError as exc:
        _error(exc)
        return 2
    except KeyboardInterrupt:
        return 130


def run() -> int:
    """The `eosflow` console script: `main` on this process's arguments, for a process that ends with it.

    Before returning, every object alive is frozen out of the cyclic collector (`gc.freeze`): the
    interpreter's teardown otherwise walks them all once more, which took 0.24-0.28 s of every run with
    pyspark's Spark Connect client and pandas imported (0.03 s frozen), a sixth of a 1-record run. Nothing a
    run needs is skipped: atexit handlers, flushes and reference-counted finalizers run as before. `main`
    itself leaves the collector alone, for callers in a long-lived process (tests, Airflow)."""
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(run())
