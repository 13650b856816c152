"""`eosflow verify` for an Iceberg sink: the table, read back through PyIceberg, against the ledger.

A reader that is not eosflow's write path (a PyIceberg scan of the table's current snapshot) on one side,
the ledger's committed ranges and counts on the other: no (topic, partition, offset) twice (I1), no row
outside a committed range (I3), and each committed range holding as many rows as it wrote (I4's counts).
"""

from __future__ import annotations

from collections import Counter

import psycopg

from eosflow.pipelines import Pipeline
from eosflow.settings import Settings
from eosflow.sinks.kafka.verify import Finding, KafkaVerifyResult

SHOWN = 5


class IcebergVerifyResult(KafkaVerifyResult):
    """The same findings as a Kafka sink's verify (the CLI and the DAG print either)."""

    def table(self) -> str:
        lines = [f"Iceberg verify of pipeline {self.pipeline}: {'ok' if self.ok else 'FAILED'}"]
        return "\n".join(lines + [f"  {f.describe()}" for f in self.checks])


def verify_iceberg_sink(settings: Settings, pipeline: Pipeline, table_name: str) -> KafkaVerifyResult:
    from eosflow.sinks.iceberg.catalog import catalog

    table = catalog(settings).load_table(table_name)
    rows = table.scan(selected_fields=("kafka_topic", "kafka_partition", "kafka_offset")).to_arrow()
    with psycopg.connect(settings.warehouse_dsn) as conn:
        ranges = conn.execute(
            "select topic, partition, start_offset, end_offset, rows_written from eosflow.ledger "
            "where pipeline = %s and kind = 'data' and end_offset > start_offset order by 1, 2, 3",
            (pipeline.name,),
        ).fetchall()
    keys = list(
        zip(
            rows.column("kafka_topic").to_pylist(),
            rows.column("kafka_partition").to_pylist(),
            rows.column("kafka_offset").to_pylist(),
            strict=True,
        )
    )
    seen = Counter(keys)
    twice = sorted(k for k, n in seen.items() if n > 1)
    by_range: Counter = Counter()
    outside = []
    starts: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for topic, partition, start, end, _ in ranges:
        starts.setdefault((topic, partition), []).append((start, end))
    for topic, partition, offset in seen:
        hit = next(((s, e) for s, e in starts.get((topic, partition), []) if s <= offset < e), None)
        if hit is None:
            outside.append((topic, partition, offset))
        else:
            by_range[(topic, partition, *hit)] += 1
    short = [
        f"{t}[{p}] {s}..{e}: ledger {w:,}, table {by_range[(t, p, s, e)]:,}"
        for t, p, s, e, w in ranges
        if by_range[(t, p, s, e)] != w
    ]
    checks = (
        Finding(
            "I1 no (topic, partition, offset) twice",
            not twice,
            f"{len(keys):,} rows in {table_name}"
            + (f"; {len(twice):,} appear more than once, e.g. {twice[:SHOWN]}" if twice else ""),
        ),
        Finding(
            "I3 no row outside a committed range",
            not outside,
            f"{len(outside):,} rows outside, e.g. {sorted(outside)[:SHOWN]}" if outside else "",
        ),
        Finding(
            "I4 each committed range holds what it wrote",
            not short,
            f"{len(ranges)} committed ranges" + (f"; differ: {'; '.join(short[:SHOWN])}" if short else ""),
        ),
    )
    return IcebergVerifyResult(pipeline.name, checks)
