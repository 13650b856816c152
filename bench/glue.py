"""Issue 15's "less glue per record", each change measured on its own, without Spark or Kafka.

Runs the Python task's per-batch work (check, split, tally, CSV) over generated orders records in
Arrow batches of Spark's size (10,000 rows), with each glue change on and off, and times
`eosflow.ledger.migrate` cached and uncached against the dev stack's warehouse.

    .venv/bin/python bench/glue.py [--records 200000] [--repeat 3]

The "before" variants are the old lines, kept here only to be measured.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from eosflow import pipelines
from eosflow.settings import load as load_settings
from eosflow.sinks.postgres import stage
from eosflow.transform import REJECTED_COLUMNS, BatchCheck
from eosflow_dev.produce import events

BATCH = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch's default


def kafka_batches(records: int) -> list[pa.RecordBatch]:
    values = [e.value for e in events.generate(seed=15, count=records)]
    batches = []
    for lo in range(0, records, BATCH):
        chunk = values[lo : lo + BATCH]
        n = len(chunk)
        batches.append(
            pa.RecordBatch.from_pydict(
                {
                    "key": pa.array([b"customer-%d" % (i % 977) for i in range(n)], pa.binary()),
                    "value": pa.array(chunk, pa.binary()),
                    "topic": pa.array(["orders"] * n, pa.string()),
                    "partition": pa.array([0] * n, pa.int32()),
                    "offset": pa.array(range(lo, lo + n), pa.int64()),
                    "timestamp": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * n, pa.timestamp("us", "UTC")),
                    "kafka_headers": pa.array(["[]"] * n, pa.string()),
                }
            )
        )
    return batches


def keep_raw_everywhere(checked: pa.RecordBatch, batch: pa.RecordBatch) -> pa.RecordBatch:
    """Before: every checked row carried its raw key and value."""
    for name, source in (("raw_key", "key"), ("raw_value", "value")):
        i = checked.schema.get_field_index(name)
        checked = checked.set_column(i, name, batch.column(source).cast(pa.binary()))
    return checked


def task(check: BatchCheck, batches, *, raw_everywhere: bool, filter_always: bool, group_by: bool) -> int:
    valid_names = check.valid_names
    rejected_names = [n for n, _ in REJECTED_COLUMNS]
    written = 0
    for batch in batches:
        checked = check(batch)
        if raw_everywhere:
            checked = keep_raw_everywhere(checked, batch)
        errors = checked.column("error")
        if group_by:  # before: a group-by per batch for counts the task can add up itself
            table = pa.table(
                [checked.column("kafka_partition"), checked.column("kafka_offset"), pc.is_valid(errors)],
                names=["p", "o", "rejected"],
            )
            table.group_by(["p", "rejected"]).aggregate([("o", "count"), ("o", "min"), ("o", "max")])
        if not filter_always and errors.null_count == checked.num_rows:
            rows = checked.select(valid_names)
            bad = None
        else:  # before: two filtering copies of the batch, even with nothing rejected
            mask = pc.is_valid(errors)
            rows = checked.filter(pc.invert(mask)).select(valid_names)
            bad = checked.filter(mask).select(rejected_names)
        written += len(stage.csv_bytes(rows))
        if bad is not None and bad.num_rows:
            written += len(stage.csv_bytes(stage._with_hex_bytes(bad)))
    return written


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    pipeline = pipelines.load(load_settings(), "orders")
    check = BatchCheck("orders", "b", "v", 65_536, pipeline.schema)
    batches = kafka_batches(args.records)
    after = dict(raw_everywhere=False, filter_always=False, group_by=False)
    runs = {
        "all three changes (now)": after,
        "raw bytes on every row (before)": {**after, "raw_everywhere": True},
        "a filtering copy with nothing rejected (before)": {**after, "filter_always": True},
        "a group-by per batch for the counts (before)": {**after, "group_by": True},
        "none of the changes": dict(raw_everywhere=True, filter_always=True, group_by=True),
    }
    base = None
    print(f"{args.records:,} valid orders records, batches of {BATCH:,}, median of {args.repeat}")
    print("| the task's glue | s | us per record | vs now |")
    print("|---|---:|---:|---:|")
    for name, flags in runs.items():
        s = timed(lambda flags=flags: task(check, batches, **flags), args.repeat)
        base = base or s
        print(f"| {name} | {s:.2f} | {s / args.records * 1e6:.2f} | {s / base:.2f} x |")
    s = timed(lambda: [check(b) for b in batches], args.repeat)
    print(f"| the check alone, for scale | {s:.2f} | {s / args.records * 1e6:.2f} | {s / base:.2f} x |")
    migrations(args.repeat)


def migrations(repeat: int) -> None:
    from eosflow.ledger import migrate

    dsn = load_settings().warehouse_dsn
    migrate.migrate(dsn)
    cached = timed(lambda: migrate.migrate(dsn), max(repeat, 20))
    uncached = timed(lambda: (migrate.forget(), migrate.migrate(dsn)), max(repeat, 20))
    print(
        f"\nmigrate() per run: {uncached * 1000:.1f} ms checked against the warehouse, "
        f"{cached * 1000:.3f} ms once checked in the process"
    )


if __name__ == "__main__":
    main()
