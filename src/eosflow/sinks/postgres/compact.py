"""Compaction: adjacent committed children of a partitioned target merged, so their count stays bounded.

Every commit attaches a child per range it read, so a pipeline run every 5 minutes adds 288 children a
day per Kafka partition. Compaction merges runs of adjacent children of one (topic, partition) into
one child of at most `target_rows` rows (a child already that large is left alone), so a partition
keeps at most ceil(rows / target_rows) + 1 full-or-filling children plus whatever committed since the
last compaction (after two, if more than MAX_MERGE_CHILDREN small children had piled up; docs/DESIGN.md,
"Partitioned targets").

One run is merged in one transaction. The merged child is built and keyed first, with no lock a commit
or replay waits for; then, under the lock commits and replays take first (the partition's position row,
FOR UPDATE), the old children are dropped (in one statement) and the merged one attached (its CHECK is its
bound: no scan), unless a replay committed since the copy began or the children changed (the copy is
dropped, left for next time). Dropping needs a brief exclusive lock on the target;
`lock_timeout` keeps a long query on the target from queueing everyone behind the compaction: it gives
up and the next compaction tries again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby

import psycopg
from psycopg import sql

from eosflow.faults import fault_point
from eosflow.rows import one_row
from eosflow.sinks.postgres import partitions
from eosflow.sinks.postgres.partitions import Child

DEFAULT_TARGET_ROWS = 5_000_000
LOCK_TIMEOUT = "5s"
# A merge locks each child it copies and drops until it commits, in Postgres' shared lock table
# (max_locks_per_transaction x max_connections: 6,400 by default, for every session): 2,000 children failed
# with "out of shared memory", 1,000 did not. 500 leaves room for everyone else; a longer run is merged in
# several merges, the next compaction merging those.
MAX_MERGE_CHILDREN = 500


@dataclass(frozen=True)
class Merge:
    """Children of one (topic, partition), adjacent, merged into one child of their joint bound."""

    children: tuple[Child, ...]
    rows: int

    @property
    def topic(self) -> str:
        return self.children[0].topic

    @property
    def partition(self) -> int:
        return self.children[0].partition

    @property
    def start(self) -> int:
        return self.children[0].start

    @property
    def end(self) -> int:
        return self.children[-1].end


def plan_merges(
    children: list[Child], rows: dict[str, int], target_rows: int, commits_only: bool = False
) -> list[Merge]:
    """Runs of adjacent children whose rows add up to at most target_rows, two children or more each, and
    at most MAX_MERGE_CHILDREN.

    Pure: `rows` is each child's row count (by table). A child at or above target_rows is never merged,
    nor, with `commits_only` (a stream's own merges), one a compaction made: each row is copied by those
    once, whatever the rate. A gap between two children (offsets no commit covered: a lost range, or a
    replay-only history) ends a run, as a child's bound must be one contiguous range.
    """
    merges: list[Merge] = []
    ordered = sorted(children, key=lambda c: (c.topic, c.partition, c.start))
    for _, group in groupby(ordered, key=lambda c: (c.topic, c.partition)):
        run: list[Child] = []
        total = 0
        for child in group:
            n = rows.get(child.table, 0)
            mergeable = n < target_rows and not (commits_only and child.merged)
            adjacent = bool(run) and run[-1].end == child.start
            room = len(run) < MAX_MERGE_CHILDREN and total + n <= target_rows
            if adjacent and mergeable and room:
                run.append(child)
                total += n
                continue
            if len(run) > 1:
                merges.append(Merge(tuple(run), total))
            run, total = ([child], n) if mergeable else ([], 0)
        if len(run) > 1:
            merges.append(Merge(tuple(run), total))
    return merges


@dataclass
class CompactSummary:
    target: str
    children_before: int = 0
    children_after: int = 0
    merged: list[Merge] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # why a merge was left for next time

    def line(self) -> str:
        text = (
            f"{self.target}: {self.children_before} children -> {self.children_after} "
            f"({len(self.merged)} merge(s), {sum(m.rows for m in self.merged):,} rows moved)"
        )
        return text + (f"; left for next time: {'; '.join(self.skipped)}" if self.skipped else "")


def compact(
    conn: psycopg.Connection,
    pipeline: str,
    target: str,
    target_rows: int = DEFAULT_TARGET_ROWS,
    log: Callable[[str], None] = lambda m: None,
    commits_only: bool = False,
    between: Callable[[int], bool] = lambda merges: True,
) -> CompactSummary:
    """Merge the target's adjacent small children; `conn` in autocommit mode (a transaction per merge).
    commits_only: only children commits made (a stream's own merges, plan_merges); between(merges): called
    before each merge but the first with the count planned, False to leave the rest for next time (a
    stream paces its merges with it, and stops them when it stops)."""
    summary = CompactSummary(target)
    children = partitions.children(conn, target)
    summary.children_before = len(children)
    rows = child_rows(conn, children)
    merges = plan_merges(children, rows, target_rows, commits_only)
    for n, merge in enumerate(merges):
        if n and not between(len(merges)):
            summary.skipped.append(f"{len(merges) - n} merge(s): stopped before them")
            break
        try:
            merged = _merge(conn, pipeline, target, merge)
        except psycopg.errors.LockNotAvailable:
            summary.skipped.append(
                f"{merge.topic}[{merge.partition}] {merge.start}-{merge.end}: "
                f"the target was busy for {LOCK_TIMEOUT}"
            )
            continue
        if not merged:
            summary.skipped.append(
                f"{merge.topic}[{merge.partition}]: changed meanwhile (a replay, or another compaction)"
            )
            continue
        summary.merged.append(merge)
        log(
            f"merged {len(merge.children)} children of {merge.topic}[{merge.partition}] into "
            f"[{merge.start}, {merge.end}) ({merge.rows:,} rows)"
        )
    summary.children_after = len(partitions.children(conn, target))
    return summary


def child_rows(conn: psycopg.Connection, children: list[Child]) -> dict[str, int]:
    """Each child's row count: as noted on it (partitions.note_rows), else counted (a child made by
    `eosflow partition` from an older table, once)."""
    counts = {}
    for child in children:
        if child.rows is None:
            (n,) = one_row(conn.execute(sql.SQL("select count(*) from {}").format(_ident(child.table))))
            counts[child.table] = n
        else:
            counts[child.table] = child.rows
    return counts


def _ident(qualified: str) -> sql.Identifier:
    return sql.Identifier(*qualified.split("."))


def _merge(conn: psycopg.Connection, pipeline: str, target: str, merge: Merge) -> bool:
    """Merge one run of children; False if they changed since the plan (left for next time).

    The merged child is built and keyed first, without the partition's position lock, so the partition's
    commits go on meanwhile (a stream's waited up to 6.7 s for a merge copying under it). Then, under that
    lock: the same children still attached and no replay committed since the copy began (a replay is the
    only writer of committed rows, and it counts itself in the position row), else the copy is dropped."""
    digest = hashlib.sha256(f"{target}\x00{merge.topic}\x00{merge.partition}\x00{merge.start}".encode())
    merged = f"staging.compact_{digest.hexdigest()[:24]}"
    key = (pipeline, merge.topic, merge.partition)
    with conn.transaction():
        replays = _replays(conn, key, lock=False)  # read before the copy's first statement
        for statement in partitions.create_child(
            target, merged, merge.topic, merge.partition, merge.start, merge.end
        ):
            conn.execute(statement)
        columns = sql.SQL(", ").join(map(sql.Identifier, partitions.columns(conn, target)))
        for child in merge.children:
            conn.execute(
                sql.SQL("insert into {} ({}) select {} from {}").format(
                    _ident(merged), columns, columns, _ident(child.table)
                )
            )
        conn.execute(partitions.add_key(merged))
        conn.execute(partitions.note_rows(merged, merge.rows, merged=True))
        fault_point("compact_copied")
        # The lock commits and replays of this partition take first: none interleaves with the swap.
        replayed = _replays(conn, key, lock=True) != replays  # a replay rewrote rows since the copy began
        current = {c.table: c for c in partitions.children(conn, target)}
        if replayed or any(current.get(c.table) != c for c in merge.children):  # or another compaction
            conn.execute(sql.SQL("drop table {}").format(_ident(merged)))
            return False
        conn.execute(f"set local lock_timeout = '{LOCK_TIMEOUT}'")
        # Dropped while attached, in one statement: a DETACH and a DROP each took 0.57-0.67 s for 60 of 380
        # children (a minute of a stream), against 0.07-0.08 s, all of it under the target's exclusive lock.
        doomed = sql.SQL(", ").join(_ident(child.table) for child in merge.children)
        conn.execute(sql.SQL("drop table {}").format(doomed))
        committed = partitions.committed_name(target, merge.topic, merge.partition, merge.start)
        for statement in partitions.move(merged, committed):
            conn.execute(statement)
        conn.execute(
            partitions.attach(target, committed, merge.topic, merge.partition, merge.start, merge.end)
        )
    return True


def _replays(conn: psycopg.Connection, key: tuple[str, str, int], lock: bool) -> int | None:
    """The partition's committed replays (eosflow.positions), under its lock if `lock`."""
    row = conn.execute(
        "select replays from eosflow.positions where pipeline = %s and topic = %s and partition = %s"
        + (" for update" if lock else ""),
        key,
    ).fetchone()
    return None if row is None else row[0]
