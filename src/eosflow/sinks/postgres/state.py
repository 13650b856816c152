"""A change stream's state table: one row per primary key, the row its last committed change left.

The pipeline's target is its changelog (every change, with its Kafka coordinates, as any pipeline's rows);
the state table is derived from it in the commit's transaction: each key a batch touched is recomputed from
all of the key's changes in the changelog, to its last by `(change_lsn, kafka_partition, kafka_offset)` (a
missing LSN counting lowest). So the state never depends on the order runs commit in, re-delivered older
changes never win, and a replay recomputes the keys its range held before and after. Before that, a
change's unchanged TOAST columns (Debezium's placeholder) are filled from the change they belong to, or the
change is rejected, out of the changelog, when nothing holds them (resolve_unchanged). docs/DESIGN.md,
"Change streams".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

import psycopg
from psycopg import sql

from eosflow.delivery import Delivery
from eosflow.errors import PipelineConfigError
from eosflow.ledger.ranges import OffsetRange
from eosflow.rows import one_row
from eosflow.schema import ddl, evolution
from eosflow.schema.changes import declared
from eosflow.sinks.deletes import Deletes
from eosflow.sinks.postgres.target import clear_views, existing_columns
from eosflow.sinks.protocol import Log, Pipeline

KEYS = "_eosflow_state_keys"  # the keys a commit recomputes: a temporary table, dropped at commit
LAST = "_eosflow_state_last"  # their last changes, likewise
FILL = "_eosflow_state_fill"  # the batch's changes with a TOAST placeholder: each one's source, or why none
# The Kafka and Iceberg sinks' words for a value nothing holds: the one setting that closes the gap.
FULL = "Set REPLICA IDENTITY FULL on the source table so Debezium sends them"
# The records at some (topic, partition, offset) coordinates: their key and value (read_back.records_at).
Raw = Callable[[list[tuple[str, int, int]]], Mapping[tuple[str, int, int], tuple[bytes | None, bytes | None]]]
IMAGE_OPS = ("c", "r", "u")
KEYED_OPS = ("c", "r", "u", "d")
# A change's place in the source's order, comparable as a row value (a missing LSN lowest).
_TERMS = ("coalesce({t}.change_lsn, -1)", "{t}.kafka_partition", "{t}.kafka_offset")
_ORDER = ", ".join(_TERMS)


def of(pipeline: Pipeline) -> tuple[str, bool] | None:
    """The pipeline's state table and whether its deletes are soft; None for a pipeline that appends."""
    table = getattr(pipeline.sink, "state_table", "")
    return (table, getattr(pipeline.sink, "deletes", Deletes.HARD) == Deletes.SOFT) if table else None


def _ident(table: str) -> sql.Identifier:
    return sql.Identifier(*table.split("."))


def _order(alias: str) -> sql.SQL:
    return sql.SQL(_ORDER.format(t=alias))


def _latest_first(alias: str) -> sql.SQL:
    """The order as an ORDER BY, latest first (each of its three terms descending)."""
    return sql.SQL(", ".join(term.format(t=alias) + " desc" for term in _TERMS))


def ensure_state_table(
    conn: psycopg.Connection, pipeline: Pipeline, state_table: str, soft: bool, log: Log
) -> None:
    """The state table (declared columns, the key NOT NULL and primary, the last change's position), and
    the changelog's indexes the recomputation reads by: the key and order, and the truncates. A declared
    column added or widened since is added or widened here too, in the caller's transaction with the
    changelog's (docs/DESIGN.md, "Declarations that evolve")."""
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
    _widen(conn, pipeline, state_table, log)
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


def _widen(conn: psycopg.Connection, pipeline: Pipeline, state_table: str, log: Log) -> None:
    """Each declared column whose type the declaration widened (the changelog's evolution allowed it: the
    same rule here) takes the declared type; a column of another type (altered by hand) is refused."""
    have = {e.name: ddl.spelling(e.type) for e in existing_columns(conn, state_table)}
    cleared = False
    for c in declared(pipeline.schema):
        was, want = have[c.name], ddl.spelling(c.type.postgres)
        if was == want:
            continue
        chosen = evolution.made_text(was, want, c.type.text_from)
        if not (chosen or evolution.widens(was, want)):
            raise PipelineConfigError(
                f"pipeline {pipeline.name!r}: column {c.name} of state table {state_table} is {was} but "
                f"declared {want}, and the one is no widening of the other. Bring it back to {was} "
                f"(`alter table {state_table} alter column {c.name} type {was}`), or declare a new pipeline "
                "whose new state table is rebuilt from the topics"
            )
        if not cleared:
            clear_views(conn, pipeline, state_table, log)
            cleared = True
        if chosen:
            for setting in ddl.text_output_settings():
                conn.execute(setting)
        conn.execute(
            sql.SQL("alter table {} alter column {} type {}").format(
                _ident(state_table), sql.Identifier(c.name), sql.SQL(c.type.postgres)
            )
        )
        log(f"{state_table}: widened column {c.name} from {was} to {want}")


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
    raw: Raw | None = None,
) -> dict[tuple[str, int], int]:
    """Recompute the state of every key remembered (and of `ranges`' keys), and apply any truncate they
    hold; inside the commit's transaction, after the changelog holds the batch's rows.

    incremental (a normal commit, not a replay): a key the state table holds has its last change in the
    state row already (S1), so its last change now is the later of that and the batch's own last change,
    and only keys the state table lacks (new, or deleted: their history may hold a newer delete) are
    recomputed from their whole history. A replay rewrites history and recomputes every key it touched.

    Returns the changes rejected per (topic, partition): those whose unchanged TOAST values nothing holds
    (resolve_unchanged), out of the changelog before the keys are recomputed."""
    ranges = list(ranges)
    rejected = resolve_unchanged(conn, pipeline, ranges, raw)
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
    params: dict[str, object] = {"ops": list(KEYED_OPS)}
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
    values: list[sql.Composable] = [sql.SQL("l.{}").format(sql.Identifier(name)) for name in image]
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
        kept: list[sql.Composable] = [
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
    return rejected


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


def resolve_unchanged(
    conn: psycopg.Connection, pipeline: Pipeline, ranges: Iterable[OffsetRange], raw: Raw | None = None
) -> dict[tuple[str, int], int]:
    """Fill the changelog rows of `ranges` whose columns Debezium sent its TOAST placeholder for
    (change_unchanged) with the value the row had, or reject the change where nothing holds it; returns
    the changes rejected per (topic, partition), which the commit moves from the range's written count to
    its rejected one.

    A change's source is the key's latest earlier change, or, for the create a primary-key update sends
    (change_old_key), the old key's latest change before the move's delete (Debezium sends both halves at
    the update's one LSN; without LSNs, the old key's latest earlier delete): the new key's own earlier
    changes are a former row's. No source (an update of a key the changelog never saw: the pipeline
    started after its create, or retention removed it), a delete as the source (the create between was
    rejected or is in a partition behind), a truncate between, or no move's delete yet (the old key's
    partition is behind this one): the change is rejected, as is one whose source is a rejected change of
    the batch. Earlier batches' rows are filled already (a rejected one is not in the changelog); within
    the batch a chain (a key moved twice, a moved key updated) is filled one link per pass, each pass one
    statement for every column. A rejected change leaves the changelog for eosflow.rejected (its record's
    bytes from `raw`, the records at their coordinates), so the state never takes a NULL the source does
    not hold, and the key's row stays as it was."""
    held = [r for r in ranges if not r.empty]
    if not held:
        return {}
    schema = pipeline.schema
    key = schema.primary_key
    types = {c.name: c.type.postgres for c in declared(schema)}
    log = _ident(pipeline.target_table)
    in_ranges = sql.SQL(" or ").join(
        sql.SQL(
            "(l.kafka_topic = {} and l.kafka_partition = {} and l.kafka_offset >= {} and l.kafka_offset < {})"
        ).format(sql.Literal(r.topic), sql.Literal(r.partition), sql.Literal(r.start), sql.Literal(r.end))
        for r in held
    )
    (placeholders,) = one_row(
        conn.execute(
            sql.SQL(
                "select exists (select from {log} l where ({in_ranges}) and l.change_unchanged is not null)"
            ).format(log=log, in_ranges=in_ranges)
        )
    )
    if not placeholders:  # the common batch: nothing to fill
        return {}

    def on_key(alias: str, old: bool) -> sql.Composable:
        return sql.SQL(" and ").join(
            sql.SQL("{a}.{k} = (l.change_old_key ->> {name})::{t}").format(
                a=sql.Identifier(alias), k=sql.Identifier(k), name=sql.Literal(k), t=sql.SQL(types[k])
            )
            if old
            else sql.SQL("{a}.{k} = l.{k}").format(a=sql.Identifier(alias), k=sql.Identifier(k))
            for k in key
        )

    def truncated(after: str, before: sql.Composable) -> sql.Composable:
        """A truncate between the source and the change (or the move's delete): the row was emptied."""
        return sql.SQL(
            "exists (select from {log} x where x.change_op = 't' and ({x}) > ({a}) and ({x}) < ({b}))"
        ).format(log=log, x=_order("x"), a=_order(after), b=before)

    fill = sql.Identifier(FILL)
    conn.execute(sql.SQL("drop table if exists {}").format(fill))
    conn.execute(
        sql.SQL(
            "create temporary table {fill} on commit drop as "
            "select distinct on (l.kafka_topic, l.kafka_partition, l.kafka_offset) "
            "l.kafka_topic, l.kafka_partition, l.kafka_offset, l.kafka_timestamp, l.batch_id, "
            "l.change_unchanged, l.change_old_key, {keys}, {source_keys}, "
            "case when l.change_old_key is null then (case when e.change_op = 'd' or e.change_op is null "
            "  then 'none' when {e_truncated} then 'truncated' end) "
            "when d.change_op is null then 'behind' "
            "when m.change_op = 'd' or m.change_op is null or {m_truncated} then 'gone' end as why, "
            "coalesce(e.kafka_topic, m.kafka_topic) as s_topic, "
            "coalesce(e.kafka_partition, m.kafka_partition) as s_partition, "
            "coalesce(e.kafka_offset, m.kafka_offset) as s_offset, false as done "
            "from {log} l "
            # the key's latest earlier change (a change that is not a move)
            "left join lateral (select p.kafka_topic, p.kafka_partition, p.kafka_offset, p.change_op, "
            "  p.change_lsn from {log} p where l.change_old_key is null and {same} "
            "  and p.change_op in ('c', 'r', 'u', 'd') and ({p_order}) < ({l_order}) "
            "  order by {p_latest} limit 1) e on true "
            # the move's delete of the old key: at the create's LSN (else the latest delete before it)
            "left join lateral (select p.kafka_topic, p.kafka_partition, p.kafka_offset, p.change_op, "
            "  p.change_lsn from {log} p where l.change_old_key is not null and {old} and p.change_op = 'd' "
            "  and (case when l.change_lsn is null then ({p_order}) < ({l_order}) "
            "  else p.change_lsn = l.change_lsn end) order by {p_latest} limit 1) d on true "
            # the old key's latest change before that delete (an earlier LSN: the delete's copies share it)
            "left join lateral (select p.kafka_topic, p.kafka_partition, p.kafka_offset, p.change_op, "
            "  p.change_lsn from {log} p where d.change_op is not null and {old} "
            "  and p.change_op in ('c', 'r', 'u', 'd') and (case when d.change_lsn is null "
            "  then ({p_order}) < ({d_order}) else p.change_lsn < d.change_lsn end) "
            "  order by {p_latest} limit 1) m on true "
            "where ({in_ranges}) and l.change_unchanged is not null "
            "order by l.kafka_topic, l.kafka_partition, l.kafka_offset"
        ).format(
            fill=fill,
            log=log,
            keys=sql.SQL(", ").join(sql.SQL("l.{}").format(sql.Identifier(k)) for k in key),
            source_keys=sql.SQL(", ").join(
                sql.SQL(
                    "case when l.change_old_key is null then l.{k} else (l.change_old_key ->> {name})::{t} "
                    "end as {s}"
                ).format(
                    k=sql.Identifier(k),
                    name=sql.Literal(k),
                    t=sql.SQL(types[k]),
                    s=sql.Identifier(f"_src_{k}"),
                )
                for k in key
            ),
            same=on_key("p", old=False),
            old=on_key("p", old=True),
            p_order=_order("p"),
            l_order=_order("l"),
            d_order=_order("d"),
            p_latest=_latest_first("p"),
            e_truncated=truncated("e", _order("l")),
            m_truncated=truncated("m", _order("d")),
            in_ranges=in_ranges,
        )
    )
    # A change whose source is a rejected change of the batch is rejected too, link by link.
    source_is = sql.SQL(
        "(g.kafka_topic, g.kafka_partition, g.kafka_offset) = (f.s_topic, f.s_partition, f.s_offset)"
    )
    spread = sql.SQL(
        "update {fill} f set why = 'rejected' where f.why is null and exists "
        "(select from {fill} g where {source_is} and g.why is not null)"
    ).format(fill=fill, source_is=source_is)
    while conn.execute(spread).rowcount:
        pass
    # Each pass fills the changes whose source is filled (or not a placeholder change of the batch).
    columns = [c.name for c in declared(schema) if c.name not in key]
    filled = sql.SQL(
        "with ready as (select f.* from {fill} f where f.why is null and not f.done and not exists "
        "(select from {fill} g where {source_is} and not g.done)), "
        "written as (update {log} t set {sets} from ready r join {log} s on {s_key} and "
        "(s.kafka_topic, s.kafka_partition, s.kafka_offset) = (r.s_topic, r.s_partition, r.s_offset) "
        "where {t_key} and (t.kafka_topic, t.kafka_partition, t.kafka_offset) = "
        "(r.kafka_topic, r.kafka_partition, r.kafka_offset) returning 1) "
        "update {fill} f set done = true from ready r where (f.kafka_topic, f.kafka_partition, "
        "f.kafka_offset) = (r.kafka_topic, r.kafka_partition, r.kafka_offset)"
    ).format(
        fill=fill,
        source_is=source_is,
        log=log,
        # the keys too: the changelog's key index finds both rows where no index is on the coordinates
        s_key=sql.SQL(" and ").join(
            sql.SQL("s.{k} = r.{s}").format(k=sql.Identifier(k), s=sql.Identifier(f"_src_{k}")) for k in key
        ),
        t_key=sql.SQL(" and ").join(sql.SQL("t.{k} = r.{k}").format(k=sql.Identifier(k)) for k in key),
        sets=sql.SQL(", ").join(
            sql.SQL("{c} = case when {name} = any(t.change_unchanged) then s.{c} else t.{c} end").format(
                c=sql.Identifier(c), name=sql.Literal(c)
            )
            for c in columns
        ),
    )
    while columns and conn.execute(filled).rowcount:
        pass
    return _reject_unfilled(conn, pipeline, raw)


def _reject_unfilled(
    conn: psycopg.Connection, pipeline: Pipeline, raw: Raw | None
) -> dict[tuple[str, int], int]:
    """The changes the fill left rejected, moved from the changelog to eosflow.rejected with their
    coordinates, their record's bytes (read back from Kafka: the changelog holds the typed row) and why;
    returns how many per (topic, partition). Only the rejected rows come to Python: few, or a first run
    from the middle of a topic, one read of Kafka either way."""
    fill = sql.Identifier(FILL)
    rows = conn.execute(
        sql.SQL(
            "select kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, batch_id, change_unchanged, "
            "change_old_key, why, s_topic, s_partition, s_offset from {} where why is not null "
            "order by 1, 2, 3"
        ).format(fill)
    ).fetchall()
    if not rows:
        return {}
    records = raw([(t, p, o) for t, p, o, *_ in rows]) if raw is not None else {}
    # a re-delivered range: on conflict do nothing
    again = "" if pipeline.delivery == Delivery.EXACTLY_ONCE else " on conflict do nothing"
    with conn.cursor() as cur:
        cur.executemany(
            "insert into eosflow.rejected (pipeline, kafka_topic, kafka_partition, kafka_offset, "
            "kafka_timestamp, raw_key, raw_value, error, batch_id) "
            "values (%s, %s, %s, %s, %s, %s, %s, %s, %s)" + again,
            [
                (
                    pipeline.name,
                    t,
                    p,
                    o,
                    ts,
                    *records.get((t, p, o), (None, None)),
                    unfillable(list(unchanged), old, why, (st, sp, so)),
                    batch,
                )
                for t, p, o, ts, batch, unchanged, old, why, st, sp, so in rows
            ],
        )
    conn.execute(
        sql.SQL(
            "delete from {log} t using {fill} f where f.why is not null and {t_key} and (t.kafka_topic, "
            "t.kafka_partition, t.kafka_offset) = (f.kafka_topic, f.kafka_partition, f.kafka_offset)"
        ).format(
            log=_ident(pipeline.target_table),
            fill=fill,
            t_key=sql.SQL(" and ").join(
                sql.SQL("t.{k} = f.{k}").format(k=sql.Identifier(k)) for k in pipeline.schema.primary_key
            ),
        )
    )
    counts: dict[tuple[str, int], int] = {}
    for t, p, *_ in rows:
        counts[(t, p)] = counts.get((t, p), 0) + 1
    return counts


def unfillable(names: list[str], old: dict | None, why: str, source: tuple[str, int, int]) -> str:
    """Why a change whose unchanged TOAST columns nothing holds is rejected (the Kafka sink's wording)."""
    moved = f" of a key moved from key {json.dumps(old, default=str)}" if old is not None else ""
    if why == "behind":
        return (
            f"unchanged TOAST column(s) {names}{moved}, whose partition has not delivered the move's delete "
            f"yet (it is behind this one): the values the row held when it moved are not known. {FULL}"
        )
    if why == "gone":
        return (
            f"unchanged TOAST column(s) {names}{moved}, whose row as it moved is not in the changelog (its "
            f"create was never read, or was rejected): their values are not known. {FULL}"
        )
    if why == "truncated":
        return (
            f"unchanged TOAST column(s) {names}: a truncate emptied the table after the key's last change in "
            f"the changelog, and the key's create since is not in it: their values are not known. {FULL}"
        )
    if why == "rejected":
        return (
            f"unchanged TOAST column(s) {names}{moved}: the change they take their values from, "
            f"{source[0]}[{source[1]}]@{source[2]}, was rejected in the same commit. {FULL}"
        )
    return (
        f"unchanged TOAST column(s) {names}: the changelog holds no earlier row of the key to take their "
        "values from (the pipeline started after the key's create, retention removed it, or its create was "
        f"rejected). {FULL}"
    )


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
        (found,) = one_row(
            conn.execute(
                sql.SQL(
                    "select exists (select from {} where change_op = 't' and kafka_topic = %s "
                    "and kafka_partition = %s and kafka_offset >= %s and kafka_offset < %s)"
                ).format(log),
                (r.topic, r.partition, r.start, r.end),
            )
        )
        if found:
            return True
    return False
