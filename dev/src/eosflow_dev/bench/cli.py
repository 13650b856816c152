"""`eosflow bench` (and `make bench`): arguments, the run, and the results folder.

Exit codes: 0 every measurement ran and every check held; 1 a measurement failed or a table did
not hold exactly the loaded records; 2 bad arguments or the stack is not running.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from eosflow_dev.bench.results import CHANGE_MEASUREMENTS, MEASUREMENTS, OVERHEADS, Result
from eosflow_dev.stack import settings as settings_mod

if TYPE_CHECKING:
    from eosflow_dev.bench.report import RunInfo
    from eosflow_dev.stack import ServiceStatus

# The bench's heavier modules (Kafka and Postgres clients, matplotlib) are imported when it runs, so
# building `eosflow`'s parser stays cheap.

# For the lead's `sub.add_parser("bench", help=HELP)`.
HELP = "eosflow's ingestion against Kafka's and Postgres' ceilings and the alternatives, same data"
DEFAULT_RECORDS = 1_000_000
# 6: the partitions `eosflow produce` gives a topic by default, so the bench measures the layout the
# project runs; a multiple of local[2]'s 2 cores, so no core idles while the last tasks finish.
DEFAULT_PARTITIONS = 6
SMOKE_RECORDS = 5_000
SMOKE_PARTITIONS = 2
SCALING_PARTITIONS = "1,4,8"
SCALING_RECORDS = "1000000,4000000"
SEED = 7
STREAM_RATE, STREAM_SECONDS = 5_000, 600
DEFAULT_CHANGES, DEFAULT_KEYS = 1_000_000, 100_000  # issue 44's change-stream workload
SMOKE_CHANGES, SMOKE_KEYS = 5_000, 500


def log(msg: str) -> None:
    print(f"eosflow bench: {msg}", file=sys.stderr, flush=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--records",
        type=_positive,
        default=None,
        help=f"records to load and move (default: {DEFAULT_RECORDS:,}; with --smoke {SMOKE_RECORDS:,})",
    )
    p.add_argument(
        "--partitions",
        type=_positive,
        default=None,
        help=f"partitions of the topic (default: {DEFAULT_PARTITIONS}; with --smoke {SMOKE_PARTITIONS})",
    )
    p.add_argument(
        "--only",
        type=_measurements,
        default=None,
        metavar="NAMES",
        help="comma-separated measurements to run (default: all of the workload's): "
        f"{','.join(MEASUREMENTS)}; "
        f"of the change-stream workload: {','.join(CHANGE_MEASUREMENTS)}",
    )
    p.add_argument(
        "--changes",
        type=_positive,
        default=None,
        help="the change-stream workload instead (issue 44): this many Debezium changes of a customers "
        f"table (default with a change measurement in --only: {DEFAULT_CHANGES:,}; with --smoke "
        f"{SMOKE_CHANGES:,}), replicated by eosflow and by a merge loop; writes changes.md/.csv/.png",
    )
    p.add_argument(
        "--keys",
        type=_positive,
        default=None,
        help=f"with --changes: the table's primary keys (default {DEFAULT_KEYS:,}; with --smoke "
        f"{SMOKE_KEYS:,})",
    )
    p.add_argument(
        "--scaling",
        action="store_true",
        help="run the partitions x records matrix instead (long: about an hour at the defaults); "
        "writes scaling.md/.csv/.png",
    )
    p.add_argument(
        "--scaling-partitions",
        type=_int_list,
        default=_int_list(SCALING_PARTITIONS),
        metavar="LIST",
        help=f"with --scaling: partition counts (default: {SCALING_PARTITIONS})",
    )
    p.add_argument(
        "--scaling-records",
        type=_int_list,
        default=_int_list(SCALING_RECORDS),
        metavar="LIST",
        help=f"with --scaling: record counts (default: {SCALING_RECORDS})",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results folder (default: <project>/bench/results; with --smoke a new temporary folder)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help=f"a tiny run ({SMOKE_RECORDS:,} records, {SMOKE_PARTITIONS} partitions) into a temporary "
        "folder: proves the harness works, times nothing worth keeping",
    )
    p.add_argument(
        "--kafka-sink",
        action="store_true",
        help="Kafka to Kafka instead: a sink: kafka pipeline against ConsumerPerformance and "
        "ProducerPerformance on the same records; writes kafka_sink.md",
    )
    p.add_argument(
        "--stream",
        action="store_true",
        help="eosflow stream under a steady load: latency p50/p95/p99 (Kafka timestamp to commit), "
        "per-batch fixed cost and memory over the run; writes stream.md",
    )
    p.add_argument(
        "--rate",
        type=_positive,
        default=STREAM_RATE,
        help=f"with --stream: events/s (default {STREAM_RATE:,})",
    )
    p.add_argument(
        "--seconds",
        type=_positive,
        default=STREAM_SECONDS,
        help=f"with --stream: how long to produce (default {STREAM_SECONDS} s)",
    )
    p.add_argument("--trigger", default="1s", help="with --stream: the stream's --trigger (default 1s)")
    p.add_argument("--seed", type=int, default=SEED, help=f"seed of the event stream (default: {SEED})")
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the bench's topics and tables afterwards (default: dropped once checked)",
    )


def stack_not_ready(statuses: Sequence[ServiceStatus]) -> list[str]:
    """The core services not answering, each with its state. The optional servers are not asked: the bench
    uses only the Spark Connect server among them, and starts it itself (another process may be starting
    one of the others at this very moment)."""
    return [f"{s.name} ({s.state})" for s in statuses if not s.optional and not s.ok]


def execute(args: argparse.Namespace, settings: settings_mod.StackSettings | None = None) -> int:
    import psycopg

    from eosflow.errors import StackError
    from eosflow_dev import stack
    from eosflow_dev.bench import machine, report
    from eosflow_dev.bench.load import LoadError

    changes = args.changes is not None or any(m in CHANGE_MEASUREMENTS for m in args.only or ())
    if changes and any(m in MEASUREMENTS for m in args.only or ()):
        log("error: --only mixes the change-stream measurements with the others; run them apart")
        return 2
    args.only = args.only or list(CHANGE_MEASUREMENTS if changes else MEASUREMENTS)
    settings = settings or settings_mod.load()
    unhealthy = stack_not_ready(stack.status(settings))
    if unhealthy:
        log(f"error: {', '.join(unhealthy)}; start the stack first: eosflow stack up")
        return 2
    records = args.records or (SMOKE_RECORDS if args.smoke else DEFAULT_RECORDS)
    partitions = args.partitions or (SMOKE_PARTITIONS if args.smoke else DEFAULT_PARTITIONS)
    default_out = settings.root / "bench" / "results"
    out_dir = args.out or (
        Path(tempfile.mkdtemp(prefix="eosflow-bench-smoke-")) if args.smoke else default_out
    )
    started = datetime.now(UTC)
    run_id = "r" + started.strftime("%Y%m%dt%H%M%S")
    # Logs and scratch files: the state directory, never the results folder (that one goes to git).
    work_dir = (out_dir / "work") if args.smoke else settings.state_dir / "bench" / run_id
    about = machine.describe(settings)
    load_before = machine.load_average()
    log(f"run {run_id}; results to {out_dir}; logs in {work_dir / 'logs'}")
    log(f"machine: {about.describe()}; load average {load_before[0]:.2f}")

    def info(problems: list[str]) -> RunInfo:
        return report.RunInfo(
            run_id,
            started.strftime("%Y-%m-%d %H:%M UTC"),
            about,
            load_before,
            machine.load_average(),
            tuple(problems),
        )

    run = _Run(settings, run_id, out_dir, default_out, work_dir, info)
    try:
        if changes:
            return _changes(args, run, partitions)
        if args.kafka_sink:
            return _kafka_sink(args, run, records, partitions)
        if args.stream:
            return _stream(args, run, partitions)
        return _scaling(args, run) if args.scaling else _single(args, run, records, partitions)
    except (LoadError, StackError, psycopg.Error) as exc:
        log(f"error: {exc} (logs in {work_dir / 'logs'})")
        return 1


@dataclass(frozen=True)
class _Run:
    settings: settings_mod.StackSettings
    run_id: str
    out_dir: Path
    default_out: Path
    work_dir: Path  # logs and scratch files
    info: Callable[[list[str]], RunInfo]  # the run's description, with the problems found so far


def _single(args: argparse.Namespace, run: _Run, records: int, partitions: int) -> int:
    from eosflow_dev.bench import report, suite

    t0 = time.monotonic()
    cell = suite.Cell(run.run_id, partitions, records, args.seed)
    outcome = suite.run_cell(run.settings, cell, args.only, run.work_dir, log, keep=args.keep)
    run_info = run.info(outcome.problems)
    paths = report.write_latest(run.out_dir, outcome.results, run_info)
    if run.out_dir.resolve() == run.default_out.resolve() and outcome.ok and not args.smoke:
        # The pages that mark a place for it show the latest table (see report.README_START).
        section = report.readme_section(outcome.results, run_info)
        readmes = (
            run.settings.root / "docs" / "development" / "benchmarks.md",
            run.default_out.parent / "README.md",
        )
        paths += [p for p in readmes if report.update_readme(p, section)]
    _finish(paths, outcome.problems, time.monotonic() - t0, args, run.work_dir)
    _print_table(outcome.results)
    return 0 if outcome.ok else 1


def _kafka_sink(args: argparse.Namespace, run: _Run, records: int, partitions: int) -> int:
    from eosflow_dev.bench import kafka_sink
    from eosflow_dev.bench.measure import MeasurementFailed

    t0 = time.monotonic()
    try:
        timed = kafka_sink.run(run.settings, run.run_id, partitions, records, args.seed, run.work_dir, log)
    except MeasurementFailed as exc:
        log(f"error: {exc}")
        return 1
    about = f"{records:,} records in {partitions} partitions, one run each, one topic."
    _write_report(
        run, "kafka_sink.md", "Kafka to Kafka", about, lambda header: kafka_sink.markdown(timed, header), t0
    )
    return 0


def _changes(args: argparse.Namespace, run: _Run, partitions: int) -> int:
    from eosflow_dev.bench import change_suite
    from eosflow_dev.bench.change_load import ChangeLoadError, plan_counts

    t0 = time.monotonic()
    changes = args.changes or (SMOKE_CHANGES if args.smoke else DEFAULT_CHANGES)
    keys = args.keys or (SMOKE_KEYS if args.smoke else DEFAULT_KEYS)
    try:
        plan_counts(changes, keys)
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    cell = change_suite.ChangeCell(run.run_id, partitions, changes, keys, args.seed)
    try:
        outcome = change_suite.run_changes(run.settings, cell, args.only, run.work_dir, log, keep=args.keep)
    except ChangeLoadError as exc:
        log(f"error: {exc}")
        return 1
    about = f"{changes:,} changes over {keys:,} keys in {partitions} partitions, one run each, one topic."
    info = run.info(outcome.problems)
    header = (
        f"# eosflow bench: change streams\n\nRun `{info.run_id}`, {info.started}: {about}\n\nMachine: "
        f"{info.machine.describe()}. Load average before {info.load_before[0]:.2f}, after "
        f"{info.load_after[0]:.2f}."
    )
    paths = change_suite.write_report(run.out_dir, outcome, header)
    print(paths[0].read_text())
    _finish(paths, outcome.problems, time.monotonic() - t0, args, run.work_dir)
    _print_table(outcome.results)
    return 0 if outcome.ok else 1


def _write_report(
    run: _Run, name: str, title: str, about: str, body: Callable[[str], str], t0: float
) -> None:
    """One Markdown report in the results folder: a header naming the run and the machine, then the body."""
    info = run.info([])
    header = (
        f"# eosflow bench: {title}\n\nRun `{info.run_id}`, {info.started}: {about}\n\nMachine: "
        f"{info.machine.describe()}. Load average before {info.load_before[0]:.2f}, after "
        f"{info.load_after[0]:.2f}."
    )
    path = run.out_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body(header))
    print(path.read_text())
    log(f"wrote {path} in {time.monotonic() - t0:.0f} s")


def _stream(args: argparse.Namespace, run: _Run, partitions: int) -> int:
    from eosflow_dev.bench import stream_latency

    t0 = time.monotonic()
    result = stream_latency.run(
        run.settings, run.run_id, args.rate, args.seconds, partitions, args.trigger, run.work_dir, log
    )
    about = f"{args.rate:,} events/s for {args.seconds} s into {partitions} partitions."
    _write_report(run, "stream.md", "stream latency", about, result.markdown, t0)
    ok = result.exactly_once and result.stream_exit == 0
    if not ok:
        log("PROBLEM: the stream did not commit every event exactly once, or did not exit 0 on SIGTERM")
    return 0 if ok else 1


def _scaling(args: argparse.Namespace, run: _Run) -> int:
    from eosflow_dev.bench import report, suite

    only = [m for m in args.only if m not in OVERHEADS]  # the fixed overhead does not depend on the size
    plan = [(p, n) for p in args.scaling_partitions for n in args.scaling_records]
    results: list[Result] = []
    problems: list[str] = []
    paths: list[Path] = []
    t0 = time.monotonic()
    for i, (partitions, records) in enumerate(plan, 1):
        log(f"scaling cell {i}/{len(plan)}: {partitions} partitions, {records:,} records")
        cell = suite.Cell(run.run_id, partitions, records, args.seed)
        outcome = suite.run_cell(run.settings, cell, only, run.work_dir, log, keep=args.keep)
        results += outcome.results
        problems += [f"{partitions} partitions, {records:,} records: {p}" for p in outcome.problems]
        # Written after every cell, so a long run that stops half-way still shows what it measured.
        paths = report.write_scaling(run.out_dir, results, run.info(problems), i, len(plan))
    _finish(paths, problems, time.monotonic() - t0, args, run.work_dir)
    return 0 if not problems else 1


def _finish(paths: list[Path], problems: list[str], elapsed: float, args, work_dir: Path) -> None:
    for problem in problems:
        log(f"PROBLEM: {problem}")
    log(f"done in {elapsed:,.0f} s; wrote " + ", ".join(str(p) for p in paths))
    if args.smoke and not problems:
        shutil.rmtree(work_dir, ignore_errors=True)  # a smoke run leaves only its results


def _print_table(results: list[Result]) -> None:
    for r in results:
        print(
            f"{r.label:<58} {r.records:>10,} rec {r.seconds:>9.2f} s {r.records_per_s:>11,.0f} rec/s "
            f"{r.peak_rss_mib:>7,.0f} MiB"
        )


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def _int_list(text: str) -> list[int]:
    return [_positive(item) for item in text.split(",") if item.strip()]


def _measurements(text: str) -> list[str]:
    names = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [n for n in names if n not in MEASUREMENTS and n not in CHANGE_MEASUREMENTS]
    if unknown or not names:
        given = ", ".join(unknown) or "(none given)"
        raise argparse.ArgumentTypeError(
            f"unknown measurement(s) {given}; choose from {', '.join([*MEASUREMENTS, *CHANGE_MEASUREMENTS])}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eosflow bench", description=HELP + " (see bench/README.md)")
    add_arguments(parser)
    return execute(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
