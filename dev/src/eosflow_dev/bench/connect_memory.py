"""The Spark Connect server's memory over many consecutive runs (issue 46: a warm server must not leak).

`python -m eosflow_dev.bench.connect_memory --runs 200` (or `make bench-connect-memory`): the stack's Spark
Connect server (started if need be) and one loaded topic; each run is a new pipeline reading the whole topic
through the server (EOSFLOW_INLINE_MAX_OFFSETS=0: a session of its own, the read, check and stage on the
server's kept Python workers, the commit), its table dropped afterwards. After each
run, the server's process tree (its JVM and the Python workers it started) is measured.

The report (bench/results/issue46/connect-memory.md and .csv) gives the resident memory after the first
runs, at every tenth run and at the end, and the least-squares slope over the second half of the runs, the
part past the JVM's warm-up: flat means the slope is within the noise of the samples.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import sys
import time
import uuid
from pathlib import Path

import psutil
import psycopg

from eosflow.runners import job
from eosflow_dev.bench import eosflow_run, load, targets
from eosflow_dev.bench.memory import MB, tree_rss
from eosflow_dev.stack import optional
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.spark_connect import SparkConnectService


@dataclasses.dataclass(frozen=True)
class Sample:
    run: int
    seconds: float  # the run, start to commit
    rss_mib: float  # the server's tree after the run
    jvm_mib: float


def measure(settings: settings_mod.StackSettings, runs: int, records: int, log=print) -> list[Sample]:
    url = optional.spark_connect(settings, log=log)
    server = SparkConnectService(settings).pid()
    if server is None:
        raise SystemExit("the stack's Spark Connect server is not running after its start: see its log")
    tag = uuid.uuid4().hex[:8]
    topic = f"bench.connect_memory_{tag}"
    load.load_topic(settings, topic, 2, records, 4601, None, log=log)
    work = settings.state_dir / "bench" / f"connect-memory-{tag}"
    samples: list[Sample] = []
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        targets.ensure_schema(conn)
        for n in range(1, runs + 1):
            name = f"bench_connect_memory_{tag}_{n}"
            table = f"{targets.SCHEMA}.{name}"
            path = eosflow_run.write_pipelines_file(work / f"{name}.yml", name, topic, table, records)
            run_settings = dataclasses.replace(
                settings, pipelines_path=path, spark_remote=url, inline_max_offsets=0
            )
            started = time.monotonic()
            summary = job.run(run_settings, name, log=lambda m: None)
            seconds = time.monotonic() - started
            if summary.records_read != records:
                raise SystemExit(f"run {n} read {summary.records_read:,} of {records:,} records: {summary}")
            targets.drop(conn, table)
            total, jvm = tree_rss(psutil.Process(server))
            samples.append(Sample(n, seconds, total / MB, jvm / MB))
            if n == 1 or n % 10 == 0:
                log(f"run {n}/{runs}: {seconds:.2f} s, server {total / MB:,.0f} MiB (JVM {jvm / MB:,.0f})")
    return samples


def slope_per_100(samples: list[Sample]) -> float:
    """MiB per 100 runs over the second half of the runs (least squares)."""
    half = samples[len(samples) // 2 :]
    if len(half) < 2:
        return 0.0
    fit = statistics.linear_regression([s.run for s in half], [s.rss_mib for s in half])
    return fit.slope * 100


def report(samples: list[Sample], records: int) -> str:
    second_half = samples[len(samples) // 2 :]
    spread = max(s.rss_mib for s in second_half) - min(s.rss_mib for s in second_half)
    lines = [
        "# The Spark Connect server's memory over consecutive runs (issue 46)",
        "",
        f"{len(samples)} runs of {records:,} records each (2 partitions), each a new pipeline through the "
        "stack's Spark Connect server (a warm one: a session per run, its Python worker daemon and workers "
        "kept across runs); the server's process tree (JVM and Python workers) measured after each run.",
        "",
        "| run | run seconds | server RSS MiB | of it JVM MiB |",
        "|---:|---:|---:|---:|",
    ]
    shown = [s for s in samples if s.run in (1, 2, 3) or s.run % 20 == 0 or s.run == len(samples)]
    lines += [f"| {s.run} | {s.seconds:.2f} | {s.rss_mib:,.0f} | {s.jvm_mib:,.0f} |" for s in shown]
    median = statistics.median(s.seconds for s in samples)
    lines += [
        "",
        f"- Slope over the second half of the runs: {slope_per_100(samples):+.1f} MiB per 100 runs "
        f"(spread of the samples there: {spread:.0f} MiB).",
        f"- Median run: {median:.2f} s.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="connect_memory", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=None, help="folder (default bench/results/issue46)")
    args = parser.parse_args(argv)
    settings = settings_mod.load()
    out = args.out or settings.root / "bench" / "results" / "issue46"
    samples = measure(settings, args.runs, args.records, log=lambda m: print(m, file=sys.stderr))
    out.mkdir(parents=True, exist_ok=True)
    with (out / "connect-memory.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([f.name for f in dataclasses.fields(Sample)])
        writer.writerows(dataclasses.astuple(s) for s in samples)
    text = report(samples, args.records)
    (out / "connect-memory.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
