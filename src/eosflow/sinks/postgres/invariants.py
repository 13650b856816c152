"""Invariants I1-I5 of docs/DESIGN.md as SQL over the warehouse, for one pipeline.

The dbt project checks the same invariants after every run; this module is the quick in-process
version the tests and the CLI use. Each check returns the offending rows, never just a boolean,
so a failure names the partition and the offsets. Each check is written so that one kind of
damage trips one invariant: a duplicated row is I1's finding, not also I3's and I4's.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from eosflow.sinks.postgres import partitions
from eosflow.sinks.protocol import Pipeline


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str


def _rows(pipeline: Pipeline) -> str:
    return (
        f"select kafka_topic, kafka_partition, kafka_offset from {pipeline.target_table} "
        "union all select kafka_topic, kafka_partition, kafka_offset from eosflow.rejected "
        "where pipeline = %(p)s"
    )


CHECKS: dict[str, str] = {
    "I1 unique coordinates": """
        select kafka_topic, kafka_partition, kafka_offset, count(*) from ({rows}) r
        group by 1, 2, 3 having count(*) > 1 order by 1, 2, 3 limit 20""",
    "I2 contiguous ledger": """
        select topic, partition, prev_end, start_offset from (
            select topic, partition, start_offset,
                   -- the max end of ALL earlier ranges: a nested range is one overlap, not also a gap
                   max(end_offset) over (partition by topic, partition order by start_offset, end_offset
                                         rows between unbounded preceding and 1 preceding) prev_end
            from eosflow.ledger where pipeline = %(p)s and kind in ('data', 'lost')) l
        where prev_end is not null and prev_end <> start_offset order by 1, 2, 4 limit 20""",
    "I3 rows inside committed ranges": """
        select r.kafka_topic, r.kafka_partition, r.kafka_offset, count(l.id) from ({rows}) r
        left join eosflow.ledger l on l.pipeline = %(p)s and l.kind = 'data'
             and l.topic = r.kafka_topic and l.partition = r.kafka_partition
             and r.kafka_offset >= l.start_offset and r.kafka_offset < l.end_offset
        group by 1, 2, 3 having count(distinct l.id) <> 1 order by 1, 2, 3 limit 20""",
    "I4 counts reconcile": """
        select l.topic, l.partition, l.start_offset, l.end_offset, l.records_read, l.rows_written,
               l.rows_rejected, f.found
        from eosflow.ledger l
        cross join lateral (
            select count(distinct r.kafka_offset) found from ({rows}) r
            where r.kafka_topic = l.topic and r.kafka_partition = l.partition
              and r.kafka_offset >= l.start_offset and r.kafka_offset < l.end_offset) f
        where l.pipeline = %(p)s and l.kind = 'data'
          and (l.records_read > l.end_offset - l.start_offset
               or l.records_read <> l.rows_written + l.rows_rejected
               or l.records_read <> f.found)
        order by 1, 2, 3 limit 20""",
    "I5 positions match the ledger": """
        select p.topic, p.partition, p.next_offset, max(l.end_offset) from eosflow.positions p
        left join eosflow.ledger l on l.pipeline = p.pipeline and l.topic = p.topic
             and l.partition = p.partition and l.kind in ('data', 'lost')
        where p.pipeline = %(p)s group by 1, 2, 3
        having p.next_offset is distinct from max(l.end_offset) order by 1, 2 limit 20""",
}


def check(conn: psycopg.Connection, pipeline: Pipeline) -> list[Violation]:
    """The checks in one transaction that commits hold off from: a statement that reads the target and the
    ledger must not meet a commit between its plan and its snapshot (docs/DESIGN.md "Partitioned targets")."""
    found: list[Violation] = []
    with conn.transaction():
        conn.execute(partitions.hold_commits(pipeline.target_table))
        for name, query in CHECKS.items():
            for row in conn.execute(query.format(rows=_rows(pipeline)), {"p": pipeline.name}).fetchall():
                found.append(Violation(name, ", ".join(str(v) for v in row)))
    return found
