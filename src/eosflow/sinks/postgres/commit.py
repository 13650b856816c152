"""Step 5 of the contract: output, rejected rows, ledger and positions in ONE transaction.

(Unless the pipeline asks for at_least_once or at_most_once: those split the commit in two, in
the order DESIGN.md gives, so the lab can show what the split costs.)

Either all of a batch becomes visible with its ranges, or none of it does. A retry of a batch
that already committed finds its ledger rows and does nothing; a run whose plan no longer
matches the stored positions (stale plan, zombie, concurrent run) is fenced and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace

import psycopg
from psycopg import sql

from eosflow.delivery import Delivery
from eosflow.faults import fault_point
from eosflow.ledger.planner import TopicRecreatedError
from eosflow.ledger.positions import (
    ALREADY_COMMITTED,
    COMMITTED,
    FencedError,
    Key,
    Locked,
    PartitionCounts,
    ReplayCountError,
    ReplayOutsideCommittedError,
    StagingIncompleteError,
    advance,
    already_committed,
    check_fencing,
    check_topic_identity,
    ledger_row,
    lock_positions,
)
from eosflow.ledger.ranges import Plan
from eosflow.rows import one_row
from eosflow.sinks.postgres import partitions, state
from eosflow.sinks.postgres.target import drop_ranges, holding_batch, staging_table
from eosflow.sinks.protocol import Pipeline

Timed = Callable[[str], AbstractContextManager[None]]  # times a part of the commit (Run.time_within)


def _untimed(step: str) -> AbstractContextManager[None]:
    return nullcontext()


def commit(
    conn: psycopg.Connection,
    pipeline: Pipeline,
    plan: Plan,
    records_read: Mapping[Key, int],
    timed: Timed = _untimed,
    raw: state.Raw | None = None,
) -> tuple[str, dict[Key, PartitionCounts]]:
    """Commit one batch under the pipeline's delivery mode; returns the outcome and committed counts.

    raw: the records at some coordinates (read back from Kafka), quoted by a change the state apply
    rejects."""
    with _staging_dropped_on_refusal(conn, plan):
        if pipeline.delivery == Delivery.AT_LEAST_ONCE:
            return _commit_output_then_positions(conn, pipeline, plan, records_read, timed, raw)
        if pipeline.delivery == Delivery.AT_MOST_ONCE:
            return _commit_positions_then_output(conn, pipeline, plan, records_read, timed, raw)
        return _commit_exactly_once(conn, pipeline, plan, records_read, timed, raw)


def _commit_exactly_once(
    conn: psycopg.Connection,
    pipeline: Pipeline,
    plan: Plan,
    records_read: Mapping[Key, int],
    timed: Timed,
    raw: state.Raw | None,
) -> tuple[str, dict[Key, PartitionCounts]]:
    stage = sql.SQL(staging_table(plan.batch_id))
    with conn.transaction():
        locked = lock_positions(conn, plan)
        if already_committed(conn, plan.batch_id):
            _clear_staging(conn, stage, plan.batch_id)
            return ALREADY_COMMITTED, {}
        check_fencing(plan, locked)
        attached = partitions.is_partitioned(conn, pipeline.target_table)
        if attached:
            counts = _range_counts(conn, plan, records_read)
            _attach_ranges(conn, pipeline, plan, counts)
        else:  # a target made before partitioned targets, not migrated yet
            counts = _staged_counts(conn, stage, pipeline, plan, records_read)
            _publish_staged(conn, pipeline, plan, stage, sql.SQL(pipeline.target_table))
        rejected = _apply_state(conn, pipeline, plan, timed, raw)
        counts = _rejected_at_commit(conn, pipeline, plan, counts, rejected, attached)
        advance(conn, plan, counts)
        _finish(conn, stage, plan)
        fault_point("in_commit")
    return COMMITTED, counts


def _apply_state(
    conn: psycopg.Connection, pipeline: Pipeline, plan: Plan, timed: Timed, raw: state.Raw | None
) -> dict[Key, int]:
    """A change stream's touched keys recomputed from the changelog, in the transaction that wrote its rows
    (in a split mode, the output's: docs/DESIGN.md "Delivery modes"); nothing for a pipeline that appends.
    Returns the changes it rejected per range (an unchanged TOAST value nothing holds)."""
    if kept := state.of(pipeline):
        with timed("state apply"):  # the run's summary shows it after the phases: "of it state apply"
            return state.apply(conn, pipeline, *kept, plan.nonempty, incremental=True, raw=raw)
    return {}


def _rejected_at_commit(
    conn: psycopg.Connection,
    pipeline: Pipeline,
    plan: Plan,
    counts: Mapping[Key, PartitionCounts],
    rejected: Mapping[Key, int],
    attached: bool = False,
) -> dict[Key, PartitionCounts]:
    """The counts with each change the state apply rejected moved from its range's written rows to its
    rejected ones (read = written + rejected still). The ledger rows of the batch, where a mode wrote them
    before its output (at_most_once, a replay), are corrected in the output's transaction; an attached
    child's noted size too."""
    moved = dict(counts)
    for key, n in rejected.items():
        c = moved[key]
        moved[key] = replace(c, written=c.written - n, rejected=c.rejected + n)
        conn.execute(
            "update eosflow.ledger set rows_written = rows_written - %s, rows_rejected = rows_rejected + %s "
            "where batch_id = %s and topic = %s and partition = %s and kind in ('data', 'replay')",
            (n, n, plan.batch_id, *key),
        )
        if attached:
            r = next(r for r in plan.ranges if (r.topic, r.partition) == key)
            child = partitions.committed_name(pipeline.target_table, r.topic, r.partition, r.start)
            conn.execute(partitions.note_rows(child, moved[key].written))
    return moved


def stages_by_range(conn: psycopg.Connection, pipeline: Pipeline, plan: Plan) -> bool:
    """Whether the batch stages a child per range (to be attached) rather than one staging table."""
    return (
        plan.kind != "replay"
        and pipeline.delivery == Delivery.EXACTLY_ONCE
        and partitions.is_partitioned(conn, pipeline.target_table)
    )


def _range_counts(
    conn: psycopg.Connection, plan: Plan, records_read: Mapping[Key, int]
) -> dict[Key, PartitionCounts]:
    """What each range's task recorded it staged (no row is scanned), checked against what was read.

    The rejected rows are counted too: staging.rejected is unlogged, and a crash empties it.
    """
    staged = {
        (t, p): (w, j)
        for t, p, w, j in conn.execute(
            "select topic, partition, rows_written, rows_rejected from staging.ranges where batch_id = %s",
            (plan.batch_id,),
        ).fetchall()
    }
    rejected = {
        (t, p): n
        for t, p, n in conn.execute(
            "select kafka_topic, kafka_partition, count(*) from staging.rejected where batch_id = %s "
            "group by 1, 2",
            (plan.batch_id,),
        ).fetchall()
    }
    written = {key: w for key, (w, _) in staged.items()}
    recorded = {key: j for key, (_, j) in staged.items()}
    return _add_up(plan, records_read, written, recorded, rejected)


def _attach_ranges(
    conn: psycopg.Connection, pipeline: Pipeline, plan: Plan, counts: Mapping[Key, PartitionCounts]
) -> None:
    """Each range's staged child attached to the target (no scan, no index build), and the rejected rows.

    A range whose task read no record (only aborted records or markers) gets an empty child, so every
    committed range holds its bound in the target and an overlapping one is refused by Postgres.
    """
    target = pipeline.target_table
    children = dict(
        ((t, p), child)
        for t, p, child in conn.execute(
            "select topic, partition, child from staging.ranges where batch_id = %s", (plan.batch_id,)
        ).fetchall()
    )
    for r in plan.ranges:
        if r.empty:
            continue
        child = children.get((r.topic, r.partition))
        if child is None:
            child = partitions.staged_child(plan.batch_id, r.topic, r.partition)
            for statement in partitions.create_child(target, child, r.topic, r.partition, r.start, r.end):
                conn.execute(statement)
            conn.execute(partitions.add_key(child))
        committed = partitions.committed_name(target, r.topic, r.partition, r.start)
        for statement in partitions.move(child, committed):
            conn.execute(statement)
        conn.execute(partitions.note_rows(committed, counts[(r.topic, r.partition)].written))
        conn.execute(partitions.attach(target, committed, r.topic, r.partition, r.start, r.end))
    conn.execute(
        "insert into eosflow.rejected select * from staging.rejected where batch_id = %s and pipeline = %s",
        (plan.batch_id, pipeline.name),
    )
    conn.execute("delete from staging.ranges where batch_id = %s", (plan.batch_id,))


def _commit_output_then_positions(
    conn: psycopg.Connection,
    pipeline: Pipeline,
    plan: Plan,
    records_read: Mapping[Key, int],
    timed: Timed,
    raw: state.Raw | None,
) -> tuple[str, dict[Key, PartitionCounts]]:
    """at_least_once: the output commits first; a crash before the positions do re-delivers it."""
    stage = sql.SQL(staging_table(plan.batch_id))
    with conn.transaction():
        if already_committed(conn, plan.batch_id):
            _clear_staging(conn, stage, plan.batch_id)
            return ALREADY_COMMITTED, {}
        counts = _staged_counts(conn, stage, pipeline, plan, records_read)
        _publish_staged(conn, pipeline, plan, stage, sql.SQL(pipeline.target_table))
        # a re-delivered change is not newer than its first copy
        rejected = _apply_state(conn, pipeline, plan, timed, raw)
        counts = _rejected_at_commit(conn, pipeline, plan, counts, rejected)
        _clear_staging(conn, stage, plan.batch_id)
    fault_point("in_commit")  # output visible, positions not moved: the duplicate window
    with conn.transaction():
        check_fencing(plan, lock_positions(conn, plan))
        advance(conn, plan, counts)
        _finish(conn, stage, plan)
    return COMMITTED, counts


def _commit_positions_then_output(
    conn: psycopg.Connection,
    pipeline: Pipeline,
    plan: Plan,
    records_read: Mapping[Key, int],
    timed: Timed,
    raw: state.Raw | None,
) -> tuple[str, dict[Key, PartitionCounts]]:
    """at_most_once: the positions commit first; a crash before the output does loses it.

    Between the two transactions the plan reads as committed, which is what another run's sweep
    (eosflow.sinks.postgres.target.sweep_staging) takes for leftovers: the batch is held for both."""
    with holding_batch(conn, plan.batch_id):
        return _positions_then_output(conn, pipeline, plan, records_read, timed, raw)


def _positions_then_output(
    conn: psycopg.Connection,
    pipeline: Pipeline,
    plan: Plan,
    records_read: Mapping[Key, int],
    timed: Timed,
    raw: state.Raw | None,
) -> tuple[str, dict[Key, PartitionCounts]]:
    stage = sql.SQL(staging_table(plan.batch_id))
    with conn.transaction():
        locked = lock_positions(conn, plan)
        if already_committed(conn, plan.batch_id):
            _clear_staging(conn, stage, plan.batch_id)
            return ALREADY_COMMITTED, {}
        check_fencing(plan, locked)
        counts = _staged_counts(conn, stage, pipeline, plan, records_read)
        advance(conn, plan, counts)
        conn.execute(
            "update eosflow.plans set status = 'committed', committed_at = now() where batch_id = %s",
            (plan.batch_id,),
        )
    fault_point("in_commit")  # positions moved, output not written: the loss window
    with conn.transaction():
        _publish_staged(conn, pipeline, plan, stage, sql.SQL(pipeline.target_table))
        rejected = _apply_state(conn, pipeline, plan, timed, raw)
        counts = _rejected_at_commit(conn, pipeline, plan, counts, rejected)  # the ledger's rows too
        _clear_staging(conn, stage, plan.batch_id)
    return COMMITTED, counts


def _staged_counts(
    conn: psycopg.Connection,
    stage: sql.Composable,
    pipeline: Pipeline,
    plan: Plan,
    records_read: Mapping[Key, int],
) -> dict[Key, PartitionCounts]:
    # Per (topic, partition): a pipeline may read several topics.
    written = (
        {
            (t, p): n
            for t, p, n in conn.execute(
                sql.SQL("select kafka_topic, kafka_partition, count(*) from {} group by 1, 2").format(stage)
            )
        }
        if _exists(conn, stage)
        else {}  # nothing was staged: a plan with no records to read, or a step skipped (caught below)
    )
    rejected = {
        (t, p): n
        for t, p, n in conn.execute(
            "select kafka_topic, kafka_partition, count(*) from staging.rejected "
            "where batch_id = %s and pipeline = %s group by 1, 2",
            (plan.batch_id, pipeline.name),
        ).fetchall()
    }
    return _add_up(plan, records_read, written, rejected)


def _add_up(
    plan: Plan,
    records_read: Mapping[Key, int],
    written: Mapping[Key, int],
    rejected: Mapping[Key, int],
    rejected_found: Mapping[Key, int] | None = None,
) -> dict[Key, PartitionCounts]:
    """Each range's counts, or StagingIncompleteError if staging does not add up to what was read.

    rejected_found: the rejected rows staging.rejected holds, when `rejected` is what tasks recorded.
    """
    counts: dict[Key, PartitionCounts] = {}
    wrong = []
    for r in plan.ranges:
        key = (r.topic, r.partition)
        c = PartitionCounts(records_read.get(key, 0), written.get(key, 0), rejected.get(key, 0))
        found = c.rejected if rejected_found is None else rejected_found.get(key, 0)
        if c.written + c.rejected != c.read or found != c.rejected:
            wrong.append(
                f"{r}: read {c.read}, staged {c.written} rows + {c.rejected} rejected"
                + ("" if found == c.rejected else f" ({found} rejected rows found)")
            )
        counts[key] = c
    if wrong:
        raise StagingIncompleteError(
            f"batch {plan.batch_id}: staging does not add up to what was read ({'; '.join(wrong)}). "
            "Nothing was committed; re-run the same run id to re-stage the batch."
        )
    return counts


def _publish_staged(
    conn: psycopg.Connection, pipeline: Pipeline, plan: Plan, stage: sql.Composable, target: sql.Composable
) -> None:
    """The staged output and rejected rows of the batch, into their tables."""
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in _columns(conn, pipeline.target_table))
    if _exists(conn, stage):
        conn.execute(sql.SQL("insert into {} ({}) select {} from {}").format(target, columns, columns, stage))
    # The rejected table is shared and keyed; a record re-delivered under at_least_once is already
    # there as rejected, and the duplicate that matters shows in the output.
    again = "" if pipeline.delivery == Delivery.EXACTLY_ONCE else " on conflict do nothing"
    conn.execute(
        "insert into eosflow.rejected select * from staging.rejected where batch_id = %s and pipeline = %s"
        + again,
        (plan.batch_id, pipeline.name),
    )


def _finish(conn: psycopg.Connection, stage: sql.Composable, plan: Plan) -> None:
    """Mark the plan committed and drop the batch's staging; the last statements before COMMIT."""
    conn.execute(
        "update eosflow.plans set status = 'committed', committed_at = now() where batch_id = %s",
        (plan.batch_id,),
    )
    _clear_staging(conn, stage, plan.batch_id)


def _clear_staging(conn: psycopg.Connection, stage: sql.Composable, batch_id: str) -> None:
    conn.execute(sql.SQL("drop table if exists {}").format(stage))
    conn.execute("delete from staging.rejected where batch_id = %s", (batch_id,))
    drop_ranges(conn, batch_id)  # children of a refused or already committed batch, never attached


def _exists(conn: psycopg.Connection, table: sql.Composable) -> bool:
    (oid,) = one_row(conn.execute("select to_regclass(%s)", (table.as_string(conn),)))
    return oid is not None


def _columns(conn: psycopg.Connection, table: str) -> list[str]:
    schema, name = table.split(".")
    return [
        row[0]
        for row in conn.execute(
            "select column_name from information_schema.columns where table_schema = %s and table_name = %s "
            "order by ordinal_position",
            (schema, name),
        ).fetchall()
    ]


def commit_replay(
    conn: psycopg.Connection,
    pipeline: Pipeline,
    plan: Plan,
    records_read: Mapping[Key, int],
    timed: Timed = _untimed,
    raw: state.Raw | None = None,
) -> tuple[str, dict[Key, PartitionCounts]]:
    """Replace the rows of already committed ranges with their re-read versions; positions stay.

    The position rows are locked as in a normal commit, so a replay and a normal run of the same
    partition never interleave their commits; a replay committed since this one was planned fences
    it. The re-read must hold exactly as many records as are committed in the range (a compacted or
    truncated topic gives back fewer): otherwise nothing is written.
    """
    stage = sql.SQL(staging_table(plan.batch_id))
    target = sql.SQL(pipeline.target_table)
    with _staging_dropped_on_refusal(conn, plan), conn.transaction():
        locked = lock_positions(conn, plan)
        if already_committed(conn, plan.batch_id):
            _clear_staging(conn, stage, plan.batch_id)
            return ALREADY_COMMITTED, {}
        check_topic_identity(plan, locked)
        beyond = [str(r) for r in plan.ranges if (locked[(r.topic, r.partition)].next_offset or 0) < r.end]
        if beyond:
            raise ReplayOutsideCommittedError(
                f"replay {plan.batch_id}: {', '.join(beyond)} reaches past the committed position; "
                "nothing was written. Replay only committed offsets, or catch up first."
            )
        _check_replay_fencing(plan, locked)
        counts = _staged_counts(conn, stage, pipeline, plan, records_read)
        _check_replay_counts(conn, pipeline, plan, counts)
        kept = state.of(pipeline)
        if kept:  # the keys the range holds now: their rows are recomputed once it is replaced
            state.remember_keys(conn, pipeline, plan.ranges)
        for r in plan.ranges:
            where = (r.topic, r.partition, r.start, r.end)
            conn.execute(
                sql.SQL(
                    "delete from {} where kafka_topic = %s and kafka_partition = %s "
                    "and kafka_offset >= %s and kafka_offset < %s"
                ).format(target),
                where,
            )
            conn.execute(
                "delete from eosflow.rejected where pipeline = %s and kafka_topic = %s "
                "and kafka_partition = %s and kafka_offset >= %s and kafka_offset < %s",
                (pipeline.name, *where),
            )
            ledger_row(conn, plan, r, "replay", counts[(r.topic, r.partition)])
            conn.execute(
                "update eosflow.positions set replays = replays + 1, updated_at = now() "
                "where pipeline = %s and topic = %s and partition = %s",
                (plan.pipeline, r.topic, r.partition),
            )
        _publish_staged(conn, pipeline, plan, stage, target)
        if kept:
            with timed("state apply"):
                rejected = state.apply(conn, pipeline, *kept, plan.ranges, raw=raw)
            counts = _rejected_at_commit(conn, pipeline, plan, counts, rejected)  # the replay's ledger rows
        _finish(conn, stage, plan)
        fault_point("in_commit")
    return COMMITTED, counts


def _check_replay_fencing(plan: Plan, locked: Mapping[Key, Locked]) -> None:
    moved = [
        f"{p.range.topic}[{p.range.partition}] planned after {p.replays} replay(s), "
        f"{locked[(p.range.topic, p.range.partition)].replays} are committed now"
        for p in plan.partitions
        if p.replays is not None and locked[(p.range.topic, p.range.partition)].replays != p.replays
    ]
    if moved:
        raise FencedError(
            f"replay {plan.batch_id} is fenced: another replay of these partitions committed since it was "
            f"planned ({'; '.join(moved)}). Nothing was written. Start a new run (new run id) if the range "
            "still needs replaying."
        )


def _check_replay_counts(
    conn: psycopg.Connection, pipeline: Pipeline, plan: Plan, counts: Mapping[Key, PartitionCounts]
) -> None:
    """The re-read of each range must hold as many records as the rows committed for it.

    By I3 and I4, the output and rejected rows inside a range are exactly the records its ledger
    ranges counted, so comparing with the rows also works for a replay that cuts through ranges.
    """
    wrong = []
    for r in plan.ranges:
        bounds = (r.topic, r.partition, r.start, r.end)
        (committed,) = one_row(
            conn.execute(
                sql.SQL(
                    "select (select count(*) from {} where kafka_topic = %s and kafka_partition = %s "
                    "and kafka_offset >= %s and kafka_offset < %s) + (select count(*) from eosflow.rejected "
                    "where pipeline = %s and kafka_topic = %s and kafka_partition = %s "
                    "and kafka_offset >= %s and kafka_offset < %s)"
                ).format(sql.SQL(pipeline.target_table)),
                (*bounds, pipeline.name, *bounds),
            )
        )
        read = counts[(r.topic, r.partition)].read
        if read != committed:
            wrong.append(f"{r}: re-read {read:,} records, {committed:,} are committed")
    if wrong:
        raise ReplayCountError(
            f"replay {plan.batch_id} refused: {'; '.join(wrong)}. Nothing was written: replacing the rows "
            "would lose or invent records. Kafka no longer holds the committed records of the range as "
            "they were (a compacted topic, or records deleted); replay a range Kafka still holds whole."
        )


@contextmanager
def _staging_dropped_on_refusal(conn: psycopg.Connection, plan: Plan) -> Iterator[None]:
    """A batch that cannot commit (fenced, refused) leaves no staging behind; a retry re-stages anyway."""
    try:
        yield
    except (FencedError, ReplayCountError, ReplayOutsideCommittedError, TopicRecreatedError):
        try:
            with conn.transaction():
                _clear_staging(conn, sql.SQL(staging_table(plan.batch_id)), plan.batch_id)
        except psycopg.Error:
            pass  # the sweep of a later run drops it (eosflow.sinks.postgres.target.sweep_staging)
        raise
