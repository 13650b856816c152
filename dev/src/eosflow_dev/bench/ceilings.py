"""The two ceilings no Kafka-to-Postgres job can beat on this machine: reading and writing alone.

- read: Kafka's own ConsumerPerformance tool reads the topic, read_committed like eosflow. Its time
  is the fetching it reports itself (JVM start and the group join left out): the broker's pace.
- write: `COPY ... FROM STDIN` of the same rows, from a CSV file, into a table shaped like eosflow's
  target with its primary key, in one transaction: Postgres' fastest way in.

The write ceiling runs as `python -m eosflow_dev.bench.ceilings copy TABLE FILE`, a process of its own,
like every other measurement.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from psycopg import sql

from eosflow_dev.bench.measure import emit_result
from eosflow_dev.bench.targets import COLUMNS, qualified
from eosflow_dev.runtime import jars, prereqs
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.settings import StackSettings

_CHUNK = 1 << 20  # bytes handed to COPY at a time


class CeilingOutputError(RuntimeError):
    """ConsumerPerformance printed something the bench cannot read."""


def consumer_performance_cmd(settings: StackSettings, topic: str, records: int, group: str) -> list[str]:
    """Kafka 4.2's tool: `--num-records` (`--messages` is deprecated), client settings as properties."""
    return [
        prereqs.java(),
        "-Xmx512M",  # what kafka-consumer-perf-test.sh gives it
        "-cp",
        jars.classpath(settings, "kafka"),
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        settings.bootstrap_servers,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--group",
        group,
        "--command-property",
        "isolation.level=read_committed",
        "--timeout",
        "30000",  # ms without a record before it gives up: generous on a loaded machine
    ]


def parse_consumer_performance(stdout: str) -> dict[str, float]:
    """The tool's CSV line: header `start.time, end.time, data.consumed.in.MB, ...` then the values."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("start.time"):
            keys = [k.strip() for k in line.split(",")]
            values = [v.strip() for v in lines[i + 1].split(",")]
            row = dict(zip(keys, values, strict=True))
            return {
                "records": float(row["data.consumed.in.nMsg"]),
                "fetch_s": float(row["fetch.time.ms"]) / 1000,
                "rebalance_s": float(row["rebalance.time.ms"]) / 1000,
                "tool_records_per_s": float(row["nMsg.sec"]),
                "fetch_records_per_s": float(row["fetch.nMsg.sec"]),
            }
    raise CeilingOutputError(f"no statistics in ConsumerPerformance's output:\n{stdout[-2000:]}")


def copy_file(dsn: str, table: str, path: Path) -> dict[str, float]:
    """COPY the CSV file into `table` in one transaction; seconds from the first byte to the commit."""
    statement = sql.SQL("copy {} ({}) from stdin (format csv)").format(
        qualified(table), sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
    )
    with psycopg.connect(dsn) as conn, path.open("rb") as fh:
        started = time.monotonic()
        with conn.cursor() as cur, cur.copy(statement) as copy:
            while block := fh.read(_CHUNK):
                copy.write(block)
        conn.commit()
        elapsed = time.monotonic() - started
    return {"copy_s": elapsed}


def copy_parallel(dsn: str, table: str, path: Path, writers: int = 2) -> dict[str, float]:
    """The file split into `writers` parts (by rows, before the clock starts), each COPYed on a
    connection of its own at the same time; seconds from the first byte to the last commit."""
    parts = _split_rows(path, writers)
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(writers) as pool:  # psycopg releases the GIL while Postgres works
            list(pool.map(lambda part: copy_file(dsn, table, part), parts))
        elapsed = time.monotonic() - started
    finally:
        for part in parts:
            part.unlink(missing_ok=True)
    return {"copy_s": elapsed, "writers": float(writers)}


def _split_rows(path: Path, n: int) -> list[Path]:
    """Rows dealt round-robin into n CSV files (the csv module keeps quoted newlines inside a row)."""
    parts = [path.with_suffix(f".part{i}.csv") for i in range(n)]
    handles = [p.open("w", newline="") for p in parts]
    try:
        outs = [csv.writer(h) for h in handles]
        with path.open(newline="") as fh:
            for i, row in enumerate(csv.reader(fh)):
                outs[i % n].writerow(row)
    finally:
        for h in handles:
            h.close()
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eosflow_dev.bench.ceilings")
    sub = parser.add_subparsers(dest="which", required=True)
    p = sub.add_parser("copy", help="the write ceiling: COPY a CSV file into a table")
    p.add_argument("table")
    p.add_argument("file", type=Path)
    p.add_argument("--writers", type=int, default=1, help="parallel COPYs of parts of the file")
    args = parser.parse_args(argv)
    dsn = settings_mod.load().warehouse_dsn
    if args.writers > 1:
        emit_result(copy_parallel(dsn, args.table, args.file, args.writers))
    else:
        emit_result(copy_file(dsn, args.table, args.file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
