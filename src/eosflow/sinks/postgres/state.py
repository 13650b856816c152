"""A change stream's state table: one row per primary key, the row its last committed change left.

The pipeline's target is its changelog (every change, with its Kafka coordinates, as any pipeline's rows);
the state table is derived from it in the commit's transaction: each key a batch touched is recomputed from
all of the key's changes in the changelog, to its last by `(change_lsn, kafka_partition, kafka_offset)` (a
missing LSN counting lowest). So the state never depends on the order runs commit in, re-delivered older
changes never win, and a replay recomputes the keys its range held before and after. docs/DESIGN.md,
"Change streams".
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg
from psycopg import sql

from eosflow.ledger.ranges import OffsetRange
from eosflow.pipelines import Pipeline
from eosflow.schema.changes import declared

KEYS = "_eosflow_state_keys"  # the keys a commit recomputes: a temporary table, dropped at commit
LAST = "_eosflow_state_last"  # their last changes, likewise
IMAGE_OPS = ("c", "r", "u")
KEYED_OPS = ("c", "r", "u", "d")
# A change's place in the source's order, comparable as a row value (a missing LSN lowest).
_TERMS = ("coalesce({t}.change_lsn, -1)", "{t}.kafka_partition", "{t}.kafka_offset")
_ORDER = ", ".join(_TERMS)


def of(pipeline: Pipeline) -> tuple[str, bool] | None:
    """The pipeline's state table and whether its deletes are soft; None for a pipeline that appends."""
    table = getattr(pipeline.sink, "state_table", "")
    return (table, getattr(pipeline.sink, "deletes", "hard") == "soft") if table else None


def _ident(table: str) -> sql.Identifier:
    return sql.Identifier(*table.split("."))


def _order(alias: str) -> sql.SQL:
    return sql.SQL(_ORDER.format(t=alias))


def _latest_first(alias: str) -> sql.SQL:
    """The order as an ORDER BY, latest first (each of its three terms descending)."""
    return sql.SQL(", ".join(term.format(t=alias) + " desc" for term in _TERMS))


def ensure_state_table(conn: psycopg.Connection, pipeline: Pipeline, state_table: str, soft: bool) -> None:
    """The state table (declared columns, the key NOT NULL and primary, the last change's position), and
    the changelog's indexes the recomputation reads by: the key and order, and the truncates."""
    schema = pipeline.schema
    key = schema.primary_key
    columns = [
        sql.SQL("{} {}{}").format(
            sql.Identifier(c.name), sql.SQL(c.type.postgres), sql.SQL(" not null" if c.name in key else "")
        )
        for c in declared(schema)
    ]
    position = [
        sql.SQL("change_lsn bigint"),
        sql.SQL("change_ts timestamptz"),
        sql.SQL("kafka_topic text not null"),
        sql.SQL("kafka_partition integer not null"),
        sql.SQL("kafka_offset bigint not null"),
        sql.SQL("batch_id text not null"),
    ]
    if soft:
        position.append(sql.SQL("deleted_at timestamptz"))
    namespace = state_table.split(".")[0]
    conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(namespace)))
    conn.execute(
        sql.SQL("create table if not exists {} ({}, primary key ({}))").format(
            _ident(state_table),
            sql.SQL(", ").join(columns + position),
            sql.SQL(", ").join(map(sql.Identifier, key)),
        )
    )
    # A column the declaration added since (an optional one: the changelog's evolution refuses the rest)
    # is added here too: earlier keys' rows hold NULL in it, as their changes did.
    for c in declared(schema):
        conn.execute(
            sql.SQL("alter table {} add column if not exists {} {}").format(
                _ident(state_table), sql.Identifier(c.name), sql.SQL(c.type.postgres)
            )
        )
    changelog = _ident(pipeline.target_table)
    name = pipeline.target_table.split(".")[1]
    conn.execute(
        sql.SQL("create index if not exists {} on {} ({}, change_lsn, kafka_partition, kafka_offset)").format(
            sql.Identifier(f"{name[:40]}_state_key"), changelog, sql.SQL(", ").join(map(sql.Identifier, key))
        )
    )
    conn.execute(
        sql.SQL(
            "create index if not exists {} on {} (change_lsn, kafka_partition, kafka_offset) where "
            "change_op = 't'"
        ).format(sql.Identifier(f"{name[:40]}_truncates"), changelog)  # fmt: skip
    )


def remember_keys(conn: psycopg.Connection, pipeline: Pipeline, ranges: Iterable[OffsetRange]) -> None:
    """Add the keys the changelog holds in `ranges` to the keys this commit recomputes (a replay calls it
    before replacing the range's rows, and again after)."""
    key = pipeline.schema.primary_key
    cols = sql.SQL(", ").join(map(sql.Identifier, key))
    types = {c.name: c.type.postgres for c in declared(pipeline.schema)}
    conn.execute(
        sql.SQL("create temporary table if not exists {} ({}) on commit drop").format(
            sql.Identifier(KEYS),
            sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(k), sql.SQL(types[k])) for k in key),
        )
    )
    for r in ranges:
        if r.empty:
            continue
        conn.execute(
            sql.SQL(
                "insert into {keys} ({cols}) select distinct {cols} from {log} where kafka_topic = %s "
                "and kafka_partition = %s and kafka_offset >= %s and kafka_offset < %s "
                "and change_op = any(%s) and ({nonnull})"
            ).format(
                keys=sql.Identifier(KEYS),
                cols=cols,
                log=_ident(pipeline.target_table),
                nonnull=sql.SQL(" and ").join(
                    sql.SQL("{} is not null").format(sql.Identifier(k)) for k in key
                ),
            ),
            (r.topic, r.partition, r.start, r.end, list(KEYED_OPS)),
        )


def apply(
    conn: psycopg.Connection,
    pipeline: Pipeline,
    state_table: str,
    soft: bool,
    ranges: Iterable[OffsetRange],
    incremental: bool = False,
) -> None:
    """Recompute the state of every key remembered (and of `ranges`' keys), and apply any truncate they
    hold; inside the commit's transaction, after the changelog holds the batch's rows.

    incremental (a normal commit, not a replay): a key the state table holds has its last change in the
    state row already (S1), so its last change now is the later of that and the batch's own last change,
    and only keys the state table lacks (new, or deleted: their history may hold a newer delete) are
    recomputed from their whole history. A replay rewrites history and recomputes every key it touched."""
    ranges = list(ranges)
    resolve_unchanged(conn, pipeline, ranges)
    remember_keys(conn, pipeline, ranges)
    schema = pipeline.schema
    key = schema.primary_key
    image = [c.name for c in declared(schema)]
    log, state = _ident(pipeline.target_table), _ident(state_table)
    truncate = _latest_truncate(conn, log)
    keys = sql.SQL(", ").join(map(sql.Identifier, key))
    on_key = sql.SQL(" and ").join(sql.SQL("l.{k} = s.{k}").format(k=sql.Identifier(k)) for k in key)
    # The last change of each remembered key, over all of its changes in the changelog: computed once (a
    # sort of every touched key's history), read by the delete and the upsert.
    conn.execute(sql.SQL("drop table if exists {}").format(sql.Identifier(LAST)))
    last_of = (
        _last_changes(log, key, "ops") if not incremental else _last_changes_since(log, state, key, ranges)
    )
    conn.execute(
        sql.SQL("create temporary table {} on commit drop as {}").format(sql.Identifier(LAST), last_of),
        {"ops": list(KEYED_OPS)},
    )
    last = sql.SQL("select * from {}").format(sql.Identifier(LAST))
    last_image = _last_changes(log, key, "image_ops")
    older = (
        sql.SQL("false")
        if truncate is None
        else sql.SQL("({}) < (%(t_lsn)s, %(t_part)s, %(t_off)s)").format(_order("l"))
    )
    params = {"ops": list(KEYED_OPS)}
    if truncate is not None:
        params |= {"t_lsn": truncate[0], "t_part": truncate[1], "t_off": truncate[2]}
    gone = sql.SQL("(l.change_op = 'd' or {})").format(older)
    if not soft:
        conn.execute(
            sql.SQL("delete from {state} s using ({last}) l where {on_key} and {gone}").format(
                state=state, last=last, on_key=on_key, gone=gone
            ),
            params,
        )
    values = [sql.SQL("l.{}").format(sql.Identifier(name)) for name in image]
    position = ["change_lsn", "change_ts", "kafka_topic", "kafka_partition", "kafka_offset", "batch_id"]
    target_cols = image + position + (["deleted_at"] if soft else [])
    selected = values + [sql.SQL("l.{}").format(sql.Identifier(p)) for p in position]
    selected += [sql.SQL("null::timestamptz")] if soft else []
    updates = [c for c in target_cols if c not in key]
    upsert = sql.SQL("on conflict ({keys}) do update set {updates}").format(
        keys=keys,
        updates=sql.SQL(", ").join(
            sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c)) for c in updates
        ),
    )
    cols = sql.SQL(", ").join(map(sql.Identifier, target_cols))
    params |= {"image_ops": list(IMAGE_OPS)}
    conn.execute(
        sql.SQL(
            "insert into {state} ({cols}) select {selected} from ({last}) l "
            "where l.change_op = any(%(image_ops)s) and not {older} {upsert}"
        ).format(
            state=state,
            cols=cols,
            selected=sql.SQL(", ").join(selected),
            last=last,
            older=older,
            upsert=upsert,
        ),  # fmt: skip
        params,
    )
    if soft:
        # A deleted key's row stays, marked, with its last image (the key's latest c, r or u; the delete's
        # own image when there was none) and the delete's position.
        first_key = sql.Identifier(key[0])
        kept = [
            sql.SQL("case when i.{k} is null then l.{c} else i.{c} end").format(
                k=first_key, c=sql.Identifier(n)
            )
            if n not in key
            else sql.SQL("l.{}").format(sql.Identifier(n))
            for n in image
        ]
        marked = kept + [sql.SQL("l.{}").format(sql.Identifier(p)) for p in position]
        marked.append(sql.SQL("coalesce(l.change_ts, l.kafka_timestamp, now())"))
        conn.execute(
            sql.SQL(
                "insert into {state} ({cols}) select {marked} from ({last}) l left join ({last_image}) i "
                "using ({keys}) where {gone} {upsert}"
            ).format(
                state=state,
                cols=cols,
                marked=sql.SQL(", ").join(marked),
                last=last,
                last_image=last_image,
                keys=keys,
                gone=gone,
                upsert=upsert,
            ),  # fmt: skip
            params,
        )
    if truncate is not None and _truncated_in(conn, log, ranges):
        # A truncate empties every key whose last change is older than it, touched by this batch or not.
        statement = "delete from {state} l where {older}" if not soft else (
            "update {state} l set deleted_at = coalesce(deleted_at, now()) where {older}"
        )  # fmt: skip
        conn.execute(sql.SQL(statement).format(state=state, older=older), params)
    conn.execute(sql.SQL("truncate {}").format(sql.Identifier(KEYS)))


def _last_changes(log: sql.Identifier, key: tuple[str, ...], ops: str) -> sql.Composable:
    """Each remembered key's last change among the ops of parameter `ops`, over all its changes."""
    keys = sql.SQL(", ").join(map(sql.Identifier, key))
    return sql.SQL(
        "select distinct on ({keys}) c.* from {log} c join (select distinct {keys} from {remembered}) k "
        "using ({keys}) where c.change_op = any({ops}) order by {keys}, {order}"
    ).format(
        keys=keys,
        log=log,
        remembered=sql.Identifier(KEYS),
        ops=sql.Placeholder(ops),
        order=_latest_first("c"),
    )


def _last_changes_since(
    log: sql.Identifier, state: sql.Identifier, key: tuple[str, ...], ranges: list[OffsetRange]
) -> sql.Composable:
    """The last changes of a normal commit's keys: for a key the state table holds, the batch's own last
    change if it is later than the state row's (else none: nothing changes); for a key it lacks, the last
    of its whole history."""
    keys = sql.SQL(", ").join(map(sql.Identifier, key))
    on_key = sql.SQL(" and ").join(sql.SQL("b.{k} = s.{k}").format(k=sql.Identifier(k)) for k in key)
    held = [r for r in ranges if not r.empty]
    if not held:
        return sql.SQL("select * from {} where false").format(log)
    in_ranges = sql.SQL(" or ").join(
        sql.SQL(
            "(c.kafka_topic = {} and c.kafka_partition = {} and c.kafka_offset >= {} and c.kafka_offset < {})"
        ).format(sql.Literal(r.topic), sql.Literal(r.partition), sql.Literal(r.start), sql.Literal(r.end))
        for r in held
    )
    batch = sql.SQL(
        "select distinct on ({keys}) c.* from {log} c where ({in_ranges}) and c.change_op = any({ops}) "
        "order by {keys}, {order}"
    ).format(keys=keys, log=log, in_ranges=in_ranges, ops=sql.Placeholder("ops"), order=_latest_first("c"))
    lacking = sql.SQL(
        "select distinct on ({keys}) c.* from {log} c join (select distinct {keys} from {remembered} r where "
        "not exists (select from {state} s where {on_r})) k using ({keys}) where c.change_op = any({ops}) "
        "order by {keys}, {order}"
    ).format(
        keys=keys,
        log=log,
        remembered=sql.Identifier(KEYS),
        state=state,
        on_r=sql.SQL(" and ").join(sql.SQL("r.{k} = s.{k}").format(k=sql.Identifier(k)) for k in key),
        ops=sql.Placeholder("ops"),
        order=_latest_first("c"),
    )
    return sql.SQL(
        "(select b.* from ({batch}) b join {state} s on {on_key} "
        "where ({b_order}) > (coalesce(s.change_lsn, -1), s.kafka_partition, s.kafka_offset)) "
        "union all ({lacking})"
    ).format(batch=batch, state=state, on_key=on_key, b_order=_order("b"), lacking=lacking)


def resolve_unchanged(conn: psycopg.Connection, pipeline: Pipeline, ranges: Iterable[OffsetRange]) -> None:
    """Fill the changelog rows of `ranges` whose columns Debezium sent its TOAST placeholder for
    (change_unchanged) with the value the row had: that of the latest earlier change of the same key, or,
    for the create a primary-key update sends, of the old key it moved the row from (change_old_key) alone:
    the new key's own earlier changes are a former row's. Earlier batches' rows are filled
    already; within the batch a chain of changes (a key moved twice, a moved key updated) is filled one link
    per pass, until a pass fills nothing. The changelog then holds each change's whole row, and the state
    takes it from there."""
    schema = pipeline.schema
    key = schema.primary_key
    types = {c.name: c.type.postgres for c in declared(schema)}
    log = _ident(pipeline.target_table)
    same = sql.SQL(" and ").join(sql.SQL("p.{k} = l.{k}").format(k=sql.Identifier(k)) for k in key)
    old = sql.SQL(" and ").join(
        sql.SQL("p.{k} = (l.change_old_key ->> {name})::{t}").format(
            k=sql.Identifier(k), name=sql.Literal(k), t=sql.SQL(types[k])
        )
        for k in key
    )
    earlier = sql.SQL(
        "from {log} p where ((l.change_old_key is null and {same}) or "
        "(l.change_old_key is not null and {old})) and p.change_op in ('c', 'r', 'u') "
        "and ({p_order}) < ({l_order}) order by {p_latest} limit 1"
    ).format(
        log=log, same=same, old=old, p_order=_order("p"), l_order=_order("l"), p_latest=_latest_first("p")
    )
    held = [r for r in ranges if not r.empty]
    if not held:
        return
    in_ranges = sql.SQL(" or ").join(
        sql.SQL(
            "(l.kafka_topic = {} and l.kafka_partition = {} and l.kafka_offset >= {} and l.kafka_offset < {})"
        ).format(sql.Literal(r.topic), sql.Literal(r.partition), sql.Literal(r.start), sql.Literal(r.end))
        for r in held
    )
    (placeholders,) = conn.execute(
        sql.SQL(
            "select exists (select from {log} l where ({in_ranges}) and l.change_unchanged is not null)"
        ).format(log=log, in_ranges=in_ranges)
    ).fetchone()
    if not placeholders:  # the common batch: nothing to fill, one scan instead of one per column
        return
    for c in declared(schema):
        if c.name in key:
            continue
        column = sql.Identifier(c.name)
        statement = sql.SQL(
            "update {log} t set {c} = r.value from (select l.kafka_topic, l.kafka_partition, l.kafka_offset, "
            "(select p.{c} {earlier}) as value from {log} l where ({in_ranges}) "
            "and {name} = any(l.change_unchanged) and l.{c} is null) r "
            "where (t.kafka_topic, t.kafka_partition, t.kafka_offset) = "
            "(r.kafka_topic, r.kafka_partition, r.kafka_offset) and r.value is not null"
        ).format(log=log, c=column, earlier=earlier, in_ranges=in_ranges, name=sql.Literal(c.name))
        while conn.execute(statement).rowcount:
            pass


def _latest_truncate(conn: psycopg.Connection, log: sql.Identifier) -> tuple[int, int, int] | None:
    row = conn.execute(
        sql.SQL(
            "select coalesce(change_lsn, -1), kafka_partition, kafka_offset from {} where change_op = 't' "
            "order by 1 desc, 2 desc, 3 desc limit 1"
        ).format(log)
    ).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def _truncated_in(conn: psycopg.Connection, log: sql.Identifier, ranges: list[OffsetRange]) -> bool:
    for r in ranges:
        if r.empty:
            continue
        (found,) = conn.execute(
            sql.SQL(
                "select exists (select from {} where change_op = 't' and kafka_topic = %s "
                "and kafka_partition = %s and kafka_offset >= %s and kafka_offset < %s)"
            ).format(log),
            (r.topic, r.partition, r.start, r.end),
        ).fetchone()
        if found:
            return True
    return False
