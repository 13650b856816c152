"""The dev tools' subcommands of `eosflow` (stack, produce, spark-cluster, airflow, demo, lab, bench).

The product's CLI (eosflow.cli.main) adds them through the entry-point group `eosflow.commands`, which this
distribution registers (dev/pyproject.toml): without eosflow-dev installed the product's commands are the same
and these are absent.
"""

from __future__ import annotations

import argparse
import sys

from eosflow_dev.stack import settings as settings_mod


def _log(msg: str) -> None:
    print(f"eosflow: {msg}", file=sys.stderr, flush=True)


def cmd_stack(args: argparse.Namespace) -> int:
    from eosflow_dev import stack
    from eosflow_dev.stack import optional, process

    s = settings_mod.load()
    if args.update_lock and args.action != "fetch":
        _log("--update-lock goes with `eosflow stack fetch` only")
        return 2
    if args.spark_archive and args.action != "fetch":
        _log("--spark-archive goes with `eosflow stack fetch` only")
        return 2
    if args.with_ and args.action not in ("up", "fetch"):
        _log("--with goes with `eosflow stack up` and `eosflow stack fetch` only (down stops them all)")
        return 2
    if args.action == "up":
        stack.up(s, log=_log, with_=args.with_)
        args.action = "status"
    if args.action == "down":
        stack.down(s, log=_log)
        return 0
    if args.action == "reset":
        stack.reset(s, log=_log)
        return 0
    if args.action == "fetch":
        stack.fetch(
            s, log=_log, update_lock=args.update_lock, with_=args.with_, spark_archive=args.spark_archive
        )
        return 0
    if args.action == "logs":
        for svc in [*stack.services(s), *optional.services(s)]:
            if args.service in (None, svc.name):
                print(f"==> {svc.log_path} <==")
                print(process.tail(svc.log_path, args.lines))
        return 0
    rows = stack.status(s)
    width = max(len(row.name) for row in rows)
    for row in rows:
        pid = str(row.pid) if row.pid else "-"
        print(f"{row.name:<{width}} {row.state:<22} pid {pid:<8} {row.endpoint}")
    return 0 if all(r.ok for r in rows) else 3


def cmd_produce(args: argparse.Namespace) -> int:
    from eosflow_dev.produce.cli import run

    return run(args, settings_mod.load(), log=_log)


def cmd_spark_cluster(args: argparse.Namespace) -> int:
    from eosflow_dev.stack.spark_cluster import SparkCluster

    cluster = SparkCluster(settings_mod.load(), workers=args.workers)
    if args.action == "up":
        print(cluster.up(log=_log))
        return 0
    if args.action == "down":
        cluster.down(log=_log)
        return 0
    alive = cluster.alive_workers()
    print(f"{cluster.master_url}: {alive} of {args.workers} workers alive")
    return 0 if alive >= args.workers else 3


def cmd_airflow(args: argparse.Namespace) -> int:
    """The DAGs on the stack's Spark Connect server when it runs (`make airflow` starts it) unless
    --spark-submit, or on a server of the user's own (EOSFLOW_SPARK_REMOTE): the stack's Airflow makes
    spark_default from it. `eosflow airflow` starts no server: what it starts, it stops."""
    import os

    from eosflow_dev.stack.airflow_local import serve
    from eosflow_dev.stack.spark_connect import SparkConnectService

    settings = settings_mod.load()
    if args.spark_submit:
        os.environ.pop("EOSFLOW_SPARK_REMOTE", None)
    elif not settings.spark_remote and (server := SparkConnectService(settings)).healthy():
        os.environ["EOSFLOW_SPARK_REMOTE"] = server.endpoint()
    remote = settings_mod.load().spark_remote
    _log(
        f"the DAGs' Spark tasks run on {remote} (eosflow airflow --spark-submit: a Spark of their own)"
        if remote
        else "the DAGs' Spark tasks spark-submit their job (warm: eosflow stack up --with spark-connect)"
    )
    return serve(settings_mod.load(), log=_log)


def cmd_demo(args: argparse.Namespace) -> int:
    from eosflow_dev.demo import run

    return run(
        settings_mod.load(),
        log=_log,
        round_trip_too=not args.no_round_trip,
        replication_too=not args.no_replication,
    )


def cmd_lab(args: argparse.Namespace) -> int:
    from eosflow_dev.lab.cli import execute

    return execute(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from eosflow_dev.bench.cli import execute

    return execute(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the dev tools' subcommands to the `eosflow` parser's subparsers."""
    from eosflow_dev.produce.cli import add_arguments as add_produce_arguments

    p = sub.add_parser(
        "stack", help="start, stop and inspect the local Kafka, Postgres, schema registry, optional servers"
    )
    p.add_argument("action", choices=["up", "down", "status", "logs", "reset", "fetch"])
    p.add_argument(
        "service",
        nargs="?",
        choices=["kafka", "postgres", "registry", "iceberg-rest", "s3", "connect"],
        help="with logs: only this one",
    )
    p.add_argument(
        "--with",
        dest="with_",
        action="append",
        default=[],
        metavar="SERVICE",
        help="with up or fetch: an optional server too, iceberg-rest, s3 or connect (repeat it, or a comma "
        "list; also EOSFLOW_STACK_WITH); down stops them whatever was asked",
    )
    p.add_argument("-n", "--lines", type=int, default=40, help="with logs: how many lines")
    p.add_argument(
        "--update-lock",
        action="store_true",
        help="with fetch: fetch every jar afresh and record its SHA-256 in infra/jars.sha256 (after a POM "
        "change; review the lock's diff before committing it)",
    )
    p.add_argument(
        "--spark-archive",
        action="store_true",
        help="with fetch: also record Spark's class-data-sharing archive (once, about 40 s; every Spark "
        "session then starts seconds sooner): make test, bench, lab, soak and airflow do",
    )
    p.set_defaults(func=cmd_stack)

    p = sub.add_parser("produce", help="write a seeded event stream to Kafka with chosen delivery settings")
    add_produce_arguments(p)
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser(
        "spark-cluster",
        help="a Spark standalone master and workers (pyspark's spark-class); use with EOSFLOW_SPARK_MASTER",
    )
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--workers", type=int, default=2, help="how many workers (default 2, one core each)")
    p.set_defaults(func=cmd_spark_cluster)

    p = sub.add_parser("airflow", help="run `airflow standalone` against the stack (Ctrl-C stops it)")
    p.add_argument(
        "--spark-submit",
        action="store_true",
        help="the Spark tasks spark-submit their job (local[2]) even when the stack's Spark Connect server "
        "runs, which is otherwise made the spark_default connection",
    )
    p.set_defaults(func=cmd_airflow)

    p = sub.add_parser(
        "demo",
        help="the main job end to end on the local stack, the round trip back through Kafka, and a database "
        "replicated with Debezium",
    )
    p.add_argument(
        "--no-round-trip",
        action="store_true",
        help="stop after the ingestion and its checks (skip publishing the orders_published mart to "
        "orders.published and ingesting it into raw.orders_roundtrip) and the replication",
    )
    p.add_argument(
        "--no-replication",
        action="store_true",
        help="skip the replication (Kafka Connect with Debezium streaming the source database's customers "
        "table into replica.customers while the DAG of the pipeline customers runs)",
    )
    p.set_defaults(func=cmd_demo)

    from eosflow_dev.lab.cli import add_arguments as add_lab_arguments

    p = sub.add_parser("lab", help="real faults x delivery modes: measured loss and duplication, as a report")
    add_lab_arguments(p)
    p.set_defaults(func=cmd_lab)

    from eosflow_dev.bench import cli as bench_cli

    p = sub.add_parser("bench", help=bench_cli.HELP)
    bench_cli.add_arguments(p)
    p.set_defaults(func=cmd_bench)
