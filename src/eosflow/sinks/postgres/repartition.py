"""`eosflow partition`: an exactly-once target made before partitioned targets, migrated in place.

The old table is renamed aside, the partitioned target made from the declaration, and each committed
(topic, partition) copied into one child whose bound is what the ledger says is committed there (the
first data range's start to the stored position); then the old table is dropped. One transaction,
under every position lock of the pipeline, so no run commits meanwhile; a row outside every committed
range (which I3 forbids) stops it with nothing changed. The copy costs one pass over the table, once.

Views on the old table (dbt's staging models) go with it: `eosflow verify` (dbt build) makes them again.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from psycopg import sql

from eosflow.delivery import Delivery
from eosflow.rows import one_row
from eosflow.schema import ddl
from eosflow.sinks.postgres import partitions


class RepartitionError(RuntimeError):
    """The target cannot be migrated as it is; nothing was changed."""


def repartition(conn: psycopg.Connection, pipeline, log: Callable[[str], None] = lambda m: None) -> int:
    """Migrate `pipeline`'s target to a partitioned one; returns the number of children made (0: it
    already was partitioned). `conn` in autocommit mode."""
    target = pipeline.target_table
    if pipeline.sink.table is None:
        raise RepartitionError(
            f"pipeline {pipeline.name!r} writes {pipeline.sink.output}: it has no table to partition"
        )
    if partitions.is_partitioned(conn, target):
        log(f"{target} is partitioned already: nothing to do")
        return 0
    if pipeline.delivery != Delivery.EXACTLY_ONCE:
        raise RepartitionError(
            f"pipeline {pipeline.name!r} is {pipeline.delivery}: only exactly_once targets are partitioned"
        )
    schema, table = target.split(".")
    aside = f"{table[:40]}_unpartitioned"
    with conn.transaction():
        conn.execute(
            "select 1 from eosflow.positions where pipeline = %s order by topic, partition for update",
            (pipeline.name,),
        )
        spans = conn.execute(
            "select l.topic, l.partition, min(l.start_offset), p.next_offset from eosflow.ledger l "
            "join eosflow.positions p using (pipeline, topic, partition) where l.pipeline = %s "
            "and l.kind = 'data' and p.next_offset is not null group by 1, 2, 4 order by 1, 2",
            (pipeline.name,),
        ).fetchall()
        conn.execute(
            sql.SQL("alter table {} rename to {}").format(
                sql.Identifier(schema, table), sql.Identifier(aside)
            )
        )
        for name in _constraints_and_indexes(conn, schema, aside):
            conn.execute(
                sql.SQL("alter index {} rename to {}").format(
                    sql.Identifier(schema, name), sql.Identifier(f"{name[:40]}_old")
                )
            )
        conn.execute(ddl.create_table(target, pipeline.schema, keyed=True))
        columns = sql.SQL(", ").join(map(sql.Identifier, partitions.columns(conn, target)))
        old = sql.Identifier(schema, aside)
        moved = 0
        for topic, partition, start, end in spans:
            if start >= end:
                continue
            child = partitions.committed_name(target, topic, partition, start)
            for statement in partitions.create_child(target, child, topic, partition, start, end):
                conn.execute(statement)
            n = conn.execute(
                sql.SQL(
                    "insert into {} ({}) select {} from {} where kafka_topic = %s and kafka_partition = %s "
                    "and kafka_offset >= %s and kafka_offset < %s"
                ).format(sql.Identifier(*child.split(".")), columns, columns, old),
                (topic, partition, start, end),
            ).rowcount
            conn.execute(partitions.add_key(child))
            conn.execute(partitions.note_rows(child, n))
            conn.execute(partitions.attach(target, child, topic, partition, start, end))
            moved += n
            log(f"{topic}[{partition}] [{start}, {end}): {n:,} rows")
        (total,) = one_row(conn.execute(sql.SQL("select count(*) from {}").format(old)))
        if total != moved:
            raise RepartitionError(
                f"{target} holds {total - moved:,} row(s) outside the ranges its ledger says are committed "
                "(an I3 violation): nothing was changed. Run `eosflow verify` to see them."
            )
        dropped = conn.execute(
            "select distinct dependent.relname from pg_depend d join pg_rewrite r on r.oid = d.objid "
            "join pg_class dependent on dependent.oid = r.ev_class where d.refobjid = %s::regclass "
            "and dependent.oid <> d.refobjid",
            (f"{schema}.{aside}",),
        ).fetchall()
        conn.execute(sql.SQL("drop table {} cascade").format(old))
    if dropped:
        log(
            f"dropped the views on the old table ({', '.join(r[0] for r in dropped)}): "
            "`eosflow verify` makes them again"
        )
    log(f"{target} is partitioned: {len(spans)} children, {moved:,} rows")
    return len(spans)


def _constraints_and_indexes(conn: psycopg.Connection, schema: str, table: str) -> list[str]:
    """The old table's index names, which the new target would take again (its primary key's)."""
    rows = conn.execute(
        "select i.relname from pg_index x join pg_class i on i.oid = x.indexrelid "
        "where x.indrelid = %s::regclass",
        (f"{schema}.{table}",),
    ).fetchall()
    return [r[0] for r in rows]
