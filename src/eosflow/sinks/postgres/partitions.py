"""The exactly-once target as a partitioned table: one child per committed offset range.

The target is `PARTITION BY RANGE (kafka_topic, kafka_partition, kafka_offset)` with its primary key
on those columns, so Postgres itself refuses two children whose offsets overlap (I1 enforced, not only
checked). A batch stages each planned range into a logged child of its own, with the CHECK constraint
that is exactly the partition bound, and the PRIMARY KEY built before the commit: the commit's ATTACH
then neither scans the child (the CHECK proves the bound) nor builds an index (the child's is taken
over), so its cost does not grow with the batch.

Children are never unlogged: after a crash Postgres empties an unlogged table, and an attached one
would silently lose committed rows.

Pure SQL builders apart from `is_partitioned` and `children`; eosflow.sinks.postgres.stage makes children,
eosflow.sinks.postgres.commit attaches them, eosflow.sinks.postgres.compact merges them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import psycopg
from psycopg import sql

COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset")


def staged_child(batch_id: str, topic: str, partition: int) -> str:
    """staging.range_<digest>: where one planned range of one batch is staged before its attach."""
    digest = hashlib.sha256(f"{batch_id}\x00{topic}\x00{partition}".encode()).hexdigest()[:24]
    return f"staging.range_{digest}"


def committed_name(target: str, topic: str, partition: int, start: int) -> str:
    """The name a child takes in the target's schema when attached: readable, unique per range start.

    The digest covers the whole target name: two targets of one schema whose names share their first
    20 characters (orders_enriched_by_customer and ..._v2) must not name a child alike. Names are made,
    never looked up (children are found through pg_inherits), so older children keep their names.
    """
    schema, table = target.split(".")
    digest = hashlib.sha256(f"{target}\x00{topic}\x00{partition}".encode()).hexdigest()[:12]
    return f"{schema}.{table[:20]}_{digest}_{partition}_{start}"


def _ident(qualified: str) -> sql.Identifier:
    return sql.Identifier(*qualified.split("."))


def create_child(
    target: str, child: str, topic: str, partition: int, start: int, end: int
) -> list[sql.Composed]:
    """A fresh, logged child for [start, end) of (topic, partition), shaped like the target, empty."""
    return [
        sql.SQL("drop table if exists {}").format(_ident(child)),
        sql.SQL("create table {} (like {} including defaults)").format(_ident(child), _ident(target)),
        check_bound(child, topic, partition, start, end),
    ]


def check_bound(child: str, topic: str, partition: int, start: int, end: int) -> sql.Composed:
    # The partition constraint of FOR VALUES FROM (t, p, start) TO (t, p, end): equal leading bounds
    # make it `topic = t and partition = p and offset >= start and offset < end` (with the columns'
    # NOT NULL), which this CHECK implies, so ATTACH skips its validating scan.
    return sql.SQL(
        "alter table {} add constraint range_bound check (kafka_topic = {} and kafka_partition = {} "
        "and kafka_offset >= {} and kafka_offset < {})"
    ).format(_ident(child), sql.Literal(topic), sql.Literal(partition), sql.Literal(start), sql.Literal(end))


def add_key(child: str) -> sql.Composed:
    """The child's primary key, built after its COPY, so the ATTACH takes it over instead of building one."""
    return sql.SQL("alter table {} add primary key ({})").format(
        _ident(child), sql.SQL(", ").join(map(sql.Identifier, COORDINATES))
    )


def attach(target: str, child: str, topic: str, partition: int, start: int, end: int) -> sql.Composed:
    return sql.SQL("alter table {} attach partition {} for values from ({}, {}, {}) to ({}, {}, {})").format(
        _ident(target),
        _ident(child),
        *map(sql.Literal, (topic, partition, start, topic, partition, end)),
    )


def move(child: str, committed: str) -> list[sql.Composed]:
    """The staged child into the target's schema, under its committed name."""
    schema, name = committed.split(".")
    staged_schema, staged_name = child.split(".")
    return [
        sql.SQL("alter table {} rename to {}").format(_ident(child), sql.Identifier(name)),
        sql.SQL("alter table {} set schema {}").format(
            sql.Identifier(staged_schema, name), sql.Identifier(schema)
        ),
    ]


def note_rows(child: str, rows: int, merged: bool = False) -> sql.Composed:
    """How many rows a child holds, kept in its comment when it is attached or merged: compaction sizes
    its merges from it without counting (a replay, which keeps a range's record count, may move a few
    records between rows and rejected rows: the note is a size, not an invariant). `merged`: made by a
    compaction, which a stream's own merges leave alone (each row copied by them once)."""
    note = f"eosflow: {rows} rows" + (", merged" if merged else "")
    return sql.SQL("comment on table {} is {}").format(_ident(child), sql.Literal(note))


def hold_commits(target: str) -> sql.Composed:
    """The lock a reader of the target and the ledger takes first (docs/DESIGN.md "Partitioned targets"):
    a commit's ATTACH and a replay's writes wait for it, readers of the target do not. ONLY: the children
    need no lock of their own, and a long query holding one must not stop the reader."""
    return sql.SQL("lock table only {} in share mode").format(_ident(target))


def is_partitioned(conn: psycopg.Connection, table: str) -> bool:
    row = conn.execute("select relkind from pg_class where oid = to_regclass(%s)", (table,)).fetchone()
    return row is not None and row[0] == "p"


def columns(conn: psycopg.Connection, table: str) -> list[str]:
    """The table's columns in order."""
    rows = conn.execute(
        "select attname from pg_attribute where attrelid = %s::regclass and attnum > 0 "
        "and not attisdropped order by attnum",
        (table,),
    ).fetchall()
    return [r[0] for r in rows]


@dataclass(frozen=True)
class Child:
    """An attached child: its table and the offsets [start, end) of one (topic, partition) it holds."""

    table: str
    topic: str
    partition: int
    start: int
    end: int
    rows: int | None = None  # as noted when attached or merged (note_rows); None: not noted
    merged: bool = False  # made by a compaction (noted so), not by a commit


_NOTE = re.compile(r"eosflow: ([0-9]+) rows(, merged)?")


def children(conn: psycopg.Connection, target: str) -> list[Child]:
    """The target's attached children, by topic, partition and start (from the catalog's bounds)."""
    rows = conn.execute(
        "select n.nspname || '.' || c.relname, pg_get_expr(c.relpartbound, c.oid), "
        "obj_description(c.oid, 'pg_class') from pg_inherits i "
        "join pg_class c on c.oid = i.inhrelid join pg_namespace n on n.oid = c.relnamespace "
        "where i.inhparent = %s::regclass",
        (target,),
    ).fetchall()
    found = [_child(table, bound, note) for table, bound, note in rows]
    return sorted(found, key=lambda c: (c.topic, c.partition, c.start))


def _child(table: str, bound: str, note: str | None) -> Child:
    # FOR VALUES FROM ('t', 0, '5') TO ('t', 0, '9'): Postgres prints the values as literals.
    lower, upper = bound.removeprefix("FOR VALUES FROM (").rstrip(")").split(") TO (")
    topic, partition, start = _values(lower)
    _, _, end = _values(upper)
    noted = _NOTE.fullmatch(note or "")
    rows = int(noted[1]) if noted else None
    return Child(table, topic, int(partition), int(start), int(end), rows, bool(noted and noted[2]))


def _values(text: str) -> tuple[str, str, str]:
    """Three literals as Postgres prints a bound: 'a''b', 0, '5' (topic names may hold commas)."""
    topic_end = text.rindex("', ", 0, text.rindex(","))
    topic = text[1:topic_end].replace("''", "'")
    partition, offset = (v.strip().strip("'") for v in text[topic_end + 2 :].split(","))
    return topic, partition, offset
