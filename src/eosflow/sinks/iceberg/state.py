"""A change stream's state in an Iceberg table (`sink: iceberg` with `changes:`): the table is the state.

One row per primary key: the declared columns of the key's last applied change, its op, source position
(`change_lsn`) and time (`change_ts`), its Kafka coordinates and batch, and `deleted_at` for soft deletes.
There is no changelog (Iceberg commits one table at a time, and the positions live in this one); the table's
snapshots are its history. docs/DESIGN.md, "State in Iceberg".

The run's Spark tasks stage the checked changes as Parquet files (files.py, under eosflow-changes/, never
added to the table). The driver, at commit:
1. reads them and reduces them to each key's last change by (change_lsn, kafka_partition, kafka_offset),
   a missing LSN lowest (pyarrow: one sort, one group-by);
2. reads the rows the table holds for those keys (one PyIceberg scan, an In or Or-of-And filter on the
   key), and, for keys without a row, the positions that hard-deleted them (the tombstones, below);
3. keeps only the changes newer than what the key holds and than the latest truncate (older and equal
   ones are taken and counted, not applied);
4. fills the columns Debezium left out (TOAST, `change_unchanged`) from the key's earlier change in the
   batch or its held row, or the old key's for the create that follows a primary-key update (the move's
   delete in the same batch); a change none of them holds the value for is rejected (a NULL or a stale
   value for a value the source holds would be a wrong row), its key's row left as it was;
5. and, in the run's one Iceberg transaction (commit._transaction, fenced as every eosflow commit):
   deletes the applied keys' rows (copy-on-write) and those a truncate empties, appends the new images
   (and a soft delete's marked row), and sets the positions, the tombstones and the truncate.

Tombstones: with hard deletes a deleted key keeps no row to hold its position, yet an older change of it
re-delivered later (Connect without exactly-once source support) must not bring it back. So the deleted
keys and the positions that deleted them are kept in one Parquet file that the table property
`eosflow.deleted` names, set in the same commit as the rows (so it is exactly as new as they are); a key
created again leaves it, a truncate clears what it covers. The latest truncate's position is the property
`eosflow.truncate`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from eosflow.ledger.mirror import RangeOutcome
from eosflow.ledger.ranges import Plan
from eosflow.schema.arrow import UTC_MICROS
from eosflow.schema.changes import declared
from eosflow.schema.declaration import RecordSchema
from eosflow.sinks.iceberg.files import Written

Key = tuple[str, int]
IMAGE_OPS = ("c", "r", "u")
KEYED_OPS = ("c", "r", "u", "d")
# A state row's own columns after the declared ones: its last applied change's op, place and time, and
# where in Kafka that change was read (the warehouse's state table has the same).
POSITION_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("change_op", pa.string()),
    ("change_lsn", pa.int64()),
    ("change_ts", UTC_MICROS),
    ("kafka_topic", pa.string()),
    ("kafka_partition", pa.int32()),
    ("kafka_offset", pa.int64()),
    ("batch_id", pa.string()),
)
DELETED_AT = ("deleted_at", UTC_MICROS)
# A change rejected at commit: its coordinates and why (state.commit makes eosflow.rejected's rows of it).
REJECTED = pa.schema(
    [
        ("kafka_topic", pa.string()),
        ("kafka_partition", pa.int32()),
        ("kafka_offset", pa.int64()),
        ("kafka_timestamp", UTC_MICROS),
        ("error", pa.string()),
    ]
)
# The Kafka sink's words for the same gap (sinks/kafka/state.py): the one setting that closes it.
REPLICA_IDENTITY_FULL = "Set REPLICA IDENTITY FULL on the source table so Debezium sends them"
# What the driver reads of the staged changes.
STAGED = (
    "change_op",
    "change_lsn",
    "change_ts",
    "change_unchanged",
    "change_old_key",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "batch_id",
)
TRUNCATE = "eosflow.truncate"
TOMBSTONES = "eosflow.deleted"
TOMBSTONE_FOLDER = "eosflow-deleted"
STAGED_FOLDER = "eosflow-changes"
# A change's place in the source's order: the LSN (missing: -1, lowest), then the Kafka partition and offset.
_LSN = "_lsn"
_NONE = -2  # the place of a key nothing holds: before every change
_ORDER = (_LSN, "kafka_partition", "kafka_offset")
_PLACE_NAMES = ("lsn", "partition", "offset")


def columns(schema: RecordSchema, soft: bool) -> list[tuple[str, pa.DataType]]:
    """The state table's columns, in order."""
    image = [(c.name, c.type.arrow) for c in declared(schema)]
    return [*image, *POSITION_COLUMNS, *([DELETED_AT] if soft else [])]


@dataclass
class Applied:
    """What a commit does to the state table, planned against the snapshot it commits on."""

    deleted: object | None  # an Iceberg filter of the rows removed (keys replaced, truncated), or None
    appended: pa.Table  # the rows added
    properties: dict[str, str] = field(default_factory=dict)  # tombstones, truncate
    changes: int = 0  # keyed changes in the batch
    keys: int = 0  # keys they touch
    applied: int = 0  # keys whose last change was applied
    superseded: int = 0  # keys whose last change was older than (or the same as) what they hold
    # Changes whose unchanged TOAST values no earlier change or row held: not applied, rejected (REJECTED).
    rejected: pa.Table = field(default_factory=REJECTED.empty_table)

    def line(self) -> str:
        text = (
            f"state: {self.changes:,} changes to {self.keys:,} keys, {self.applied:,} applied, "
            f"{self.superseded:,} older than what the table holds (taken, not applied)"
        )
        if self.rejected.num_rows:
            text += (
                f"; {self.rejected.num_rows:,} change(s) rejected: unchanged TOAST value(s) no earlier "
                "change or row held (a key moved from a row an earlier run deleted or from a partition "
                "behind, or a key with no row). REPLICA IDENTITY FULL on the source table sends every value"
            )
        return text


Raw = Callable[[list[tuple[str, int, int]]], Mapping[tuple[str, int, int], tuple[bytes | None, bytes | None]]]


def commit(
    table,
    plan: Plan,
    written: dict[Key, Written],
    schema: RecordSchema,
    soft: bool,
    log: Callable,
    raw: Raw | None = None,
) -> dict[Key, RangeOutcome]:
    """The run's one commit to a state table: the ranges decided as any Iceberg commit's, then their changes
    applied to the rows and the positions set in one fenced transaction; the outcome of each range.

    A change the apply rejects (fill_unchanged) moves, in `written`, from its range's written rows to its
    rejected ones, with a rejected rows' file of its own (raw key and value from `raw`, the records at
    their coordinates): the range's counts and files, in its position and then in the ledger's mirror,
    stay those of every record read, written or rejected."""
    from eosflow.sinks.iceberg import commit as iceberg_commit

    outcomes, going, _ = iceberg_commit.deciding(table, plan, written)
    if not going:
        return outcomes
    files = [f for p in going for f in written.get((p.range.topic, p.range.partition), Written()).data_files]
    applied = plan_state(table, read_staged(table, files, schema), schema, soft, plan.batch_id)
    log(applied.line())
    if applied.rejected.num_rows:
        _reject(table, plan, written, applied.rejected, raw)
    properties = iceberg_commit.position_properties(table, plan, going, written)
    deleted = [] if applied.deleted is None else [applied.deleted]
    return outcomes | iceberg_commit._transaction(
        table, plan, going, written, [], properties | applied.properties, deleted, applied.appended
    )


def _reject(table, plan: Plan, written: dict[Key, Written], rejected: pa.Table, raw: Raw | None) -> None:
    """The rejected changes as rejected rows (eosflow.rejected's columns), a file per range, counted."""
    from eosflow.sinks.iceberg import storage
    from eosflow.sinks.iceberg.files import write_rejected

    places = list(
        zip(
            rejected["kafka_topic"].to_pylist(),
            rejected["kafka_partition"].to_pylist(),
            rejected["kafka_offset"].to_pylist(),
            strict=True,
        )
    )
    records = raw(places) if raw is not None else {}
    n = rejected.num_rows
    rows = rejected.append_column("pipeline", pa.array([plan.pipeline] * n, pa.string()))
    rows = rows.append_column(
        "raw_key", pa.array([records.get(p, (None, None))[0] for p in places], pa.binary())
    )
    rows = rows.append_column(
        "raw_value", pa.array([records.get(p, (None, None))[1] for p in places], pa.binary())
    )
    rows = rows.append_column("batch_id", pa.array([plan.batch_id] * n, pa.string()))
    properties = storage.io_properties(table)
    for key in sorted({(t, p) for t, p, _ in places}):
        mine = rows.filter(
            pc.and_(pc.equal(rows["kafka_topic"], key[0]), pc.equal(rows["kafka_partition"], key[1]))
        )
        w = written[key]
        w.rejected_files.append(
            write_rejected(table.location(), properties, plan.batch_id, plan.pipeline, key, mine)
        )
        w.written -= mine.num_rows
        w.rejected += mine.num_rows


def read_staged(table, files: list[str], schema: RecordSchema) -> pa.Table:
    """The checked changes the run's tasks staged, as one Arrow table (declared columns and the change's)."""
    import pyarrow.parquet as pq

    from eosflow.sinks.iceberg import storage

    wanted = [c.name for c in declared(schema)] + list(STAGED)
    properties = storage.io_properties(table)
    parts = []
    for uri in files:
        filesystem, path = storage.filesystem(properties, uri)
        parts.append(pq.read_table(path, filesystem=filesystem, columns=wanted))
    if not parts:
        from eosflow.schema.arrow import valid_columns

        types = dict(valid_columns(schema))
        return pa.schema([(n, types[n]) for n in wanted]).empty_table()
    return pa.concat_tables(parts)


def plan_state(table, changes: pa.Table, schema: RecordSchema, soft: bool, batch_id: str) -> Applied:
    """What the batch's `changes` do to the state table as `table` (its loaded snapshot) holds it."""
    key = list(schema.primary_key)
    wanted = table_schema(table)
    changes = _as_table_types(changes, wanted).append_column(_LSN, pc.fill_null(changes["change_lsn"], -1))
    truncate, truncated_now = _truncate(table, changes)
    keyed = changes.filter(pc.is_in(changes["change_op"], value_set=pa.array(KEYED_OPS)))
    done = Applied(None, wanted.empty_table(), changes=keyed.num_rows)
    if keyed.num_rows == 0 and not truncated_now:
        return done
    unchanged = pc.is_valid(keyed["change_unchanged"])
    placeholders = pc.any(unchanged).as_py() or False
    old_keys = _old_keys(keyed.filter(unchanged), schema) if placeholders else []
    held = _held(table, keyed.select(key), old_keys, key, wanted)
    tombstones = _tombstones(table, key)
    if placeholders:
        mentioned = keyed.filter(unchanged).select(key)
        if old_keys:
            mentioned = pa.concat_tables([mentioned, pa.Table.from_pylist(old_keys, schema=mentioned.schema)])
        dead = tombstones.join(mentioned, key, join_type="left semi")
        keyed, done.rejected = fill_unchanged(keyed, held, schema, dead, truncate)
    last = last_changes(keyed, key)
    done.keys = last.num_rows
    positions = _held_positions(last, held, tombstones, key)
    newer = _after(_place(last), positions)
    if truncate is not None:
        newer = pc.and_(newer, _after(_place(last), _constant(truncate, last.num_rows)))
    applied = last.filter(newer)
    done.applied, done.superseded = applied.num_rows, last.num_rows - applied.num_rows
    ops = applied["change_op"]
    images = applied.filter(pc.is_in(ops, value_set=pa.array(IMAGE_OPS)))
    deletes = applied.filter(pc.equal(ops, "d"))
    rows = [_rows(images, wanted, batch_id)]
    if soft and deletes.num_rows:
        rows.append(_marked(deletes, keyed, held, key, wanted, batch_id))
    # The rows replaced: those of the applied keys the table holds (a key it lacks has nothing to delete).
    replaced = applied.filter(pc.is_valid(positions.take(_indices(newer))["h_offset"]))
    filters = [_match(replaced.select(key), key)] if replaced.num_rows else []
    if truncated_now:
        assert truncate is not None  # the batch's truncate is the latest
        filters.append(_older_than(truncate))
        if soft:
            rows.append(_truncated_marks(table, truncate, applied.select(key), key, wanted))
        done.properties[TRUNCATE] = json.dumps(dict(zip(_PLACE_NAMES, truncate, strict=True)))
    done.deleted = _or(filters)
    done.appended = pa.concat_tables([r.cast(wanted) for r in rows])
    if not soft:
        done.properties |= _new_tombstones(table, tombstones, deletes, images, truncate, key, batch_id)
    return done


def _as_table_types(changes: pa.Table, wanted: pa.Schema) -> pa.Table:
    """The staged columns in the types the table reads back (PyIceberg reads text as large_string): Arrow
    joins only keys of one type."""
    for i, name in enumerate(changes.column_names):
        if name in wanted.names and changes.schema.field(i).type != wanted.field(name).type:
            changes = changes.set_column(i, name, pc.cast(changes[name], wanted.field(name).type))
    return changes


def table_schema(table) -> pa.Schema:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(table.schema(), include_field_ids=False)


# --- the order


def last_changes(changes: pa.Table, key: list[str]) -> pa.Table:
    """Each key's last change by the order (one sort, one group-by: no per-record Python)."""
    if changes.num_rows == 0:
        return changes
    ordered = changes.sort_by([(c, "ascending") for c in _ORDER])
    ordered = ordered.append_column("_i", pa.array(range(ordered.num_rows), pa.int64()))
    last = ordered.group_by(key, use_threads=False).aggregate([("_i", "max")])
    return ordered.take(last["_i_max"]).drop_columns(["_i"])


def _place(rows: pa.Table) -> tuple[pa.Array, pa.Array, pa.Array]:
    return (
        rows[_LSN].combine_chunks(),
        rows["kafka_partition"].combine_chunks(),
        rows["kafka_offset"].combine_chunks(),
    )


def _after(a: tuple, b) -> pa.Array:
    """Where place `a` comes after place `b` in the order (row by row; both without NULLs)."""
    if isinstance(b, pa.Table):
        b = (b["h_lsn"], b["h_partition_eff"], b["h_offset_eff"])
    (a_lsn, a_part, a_off), (b_lsn, b_part, b_off) = a, b
    gt, eq, or_, and_ = pc.greater, pc.equal, pc.or_, pc.and_
    later_offset = and_(eq(a_part, b_part), gt(a_off, b_off))
    return or_(gt(a_lsn, b_lsn), and_(eq(a_lsn, b_lsn), or_(gt(a_part, b_part), later_offset)))


def _constant(place: tuple[int, int, int], n: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    lsn, partition, offset = place
    return (
        pa.array([lsn] * n, pa.int64()),
        pa.array([partition] * n, pa.int32()),
        pa.array([offset] * n, pa.int64()),
    )


def _indices(mask: pa.Array) -> pa.Array:
    return pc.indices_nonzero(mask)


def _held_positions(last: pa.Table, held: pa.Table, tombstones: pa.Table, key: list[str]) -> pa.Table:
    """Per row of `last` (same order): the place the key holds, its row's if the table has one, else its
    tombstone's, else before everything (h_lsn -2); h_offset is the row's offset (NULL: no row)."""
    rows = held.select([*key, "change_lsn", "kafka_partition", "kafka_offset"]).rename_columns(
        [*key, "h_lsn", "h_partition", "h_offset"]
    )
    dead = tombstones.select([*key, "change_lsn", "kafka_partition", "kafka_offset"]).rename_columns(
        [*key, "t_lsn", "t_partition", "t_offset"]
    )
    left = last.select(key).append_column("_row", pa.array(range(last.num_rows), pa.int64()))
    joined = left.join(rows, key, join_type="left outer").join(dead, key, join_type="left outer")
    joined = joined.sort_by("_row")
    has_row, has_tomb = pc.is_valid(joined["h_offset"]), pc.is_valid(joined["t_offset"])
    lsn = pc.if_else(
        has_row,
        pc.fill_null(joined["h_lsn"], -1),
        pc.if_else(has_tomb, pc.fill_null(joined["t_lsn"], -1), _NONE),
    )
    partition = pc.if_else(has_row, joined["h_partition"], pc.fill_null(joined["t_partition"], 0))
    offset = pc.if_else(has_row, joined["h_offset"], pc.fill_null(joined["t_offset"], 0))
    return pa.table(
        {
            "h_lsn": pc.cast(lsn, pa.int64()),
            "h_partition_eff": pc.cast(partition, pa.int32()),
            "h_offset_eff": pc.cast(offset, pa.int64()),
            "h_offset": joined["h_offset"],
        }
    )


# --- what the table holds


def _held(table, touched: pa.Table, old_keys: list[dict], key: list[str], wanted: pa.Schema) -> pa.Table:
    """The rows the table holds for the touched keys (and the old keys of moved rows), every column.

    PyIceberg binds a scan's filter again for every file it reads, so an In of 10,000 keys over 1,000 files
    took 90 s (measured): the scan's filter is the keys' range on the first key column (files pruned by
    their column bounds, one cheap bind a file), and the exact keys are a semi-join in Arrow."""
    if table.current_snapshot() is None:
        return wanted.empty_table()
    keys = touched.group_by(key, use_threads=False).aggregate([])
    if old_keys:
        more = pa.Table.from_pylist(old_keys, schema=keys.schema)
        keys = pa.concat_tables([keys, more]).group_by(key, use_threads=False).aggregate([])
    if keys.num_rows == 0:
        return wanted.empty_table()
    found = table.scan(row_filter=_bounds(keys, key), selected_fields=tuple(wanted.names)).to_arrow()
    found = found.select(wanted.names).cast(wanted)
    return found.join(keys, key, join_type="left semi").select(wanted.names)


def _bounds(keys: pa.Table, key: list[str]):
    """The range of the keys' first column, as an Iceberg filter (what prunes files by their bounds)."""
    from pyiceberg.expressions import And

    from eosflow.sinks.iceberg.predicates import greater_than_or_equal, less_than_or_equal

    low, high = pc.min_max(keys[key[0]]).values()
    return And(greater_than_or_equal(key[0], low.as_py()), less_than_or_equal(key[0], high.as_py()))


def _match(keys: pa.Table, key: list[str]):
    """The rows of `keys` as an Iceberg filter: In on one key column, an Or of Ands on several; within the
    keys' range, which prunes the files a delete reads (PyIceberg prunes by an In of at most 200 values
    only)."""
    from pyiceberg.expressions import And
    from pyiceberg.table.upsert_util import create_match_filter

    return And(_bounds(keys, key), create_match_filter(keys, key))


def _or(filters: list):
    from pyiceberg.expressions import Or

    if not filters:
        return None
    return filters[0] if len(filters) == 1 else Or(*filters)


# --- truncates


def _truncate(table, changes: pa.Table) -> tuple[tuple[int, int, int] | None, bool]:
    """The latest truncate (the batch's or the one the table remembers), and whether the batch's is it."""
    stored = table.properties.get(TRUNCATE)
    before = None if stored is None else tuple(json.loads(stored)[k] for k in _PLACE_NAMES)
    truncates = changes.filter(pc.equal(changes["change_op"], "t"))
    if truncates.num_rows == 0:
        return before, False
    latest = truncates.sort_by([(c, "descending") for c in _ORDER]).slice(0, 1)
    place = (latest[_LSN][0].as_py(), latest["kafka_partition"][0].as_py(), latest["kafka_offset"][0].as_py())
    if before is not None and before >= place:
        return before, False
    return place, True


def _older_than(place: tuple[int, int, int]):
    """The rows whose change comes before `place`, as an Iceberg filter."""
    from pyiceberg.expressions import And, Or

    from eosflow.sinks.iceberg.predicates import equal_to, is_null, less_than

    lsn, partition, offset = place
    same_lsn = is_null("change_lsn") if lsn == -1 else equal_to("change_lsn", lsn)
    earlier_in_lsn = And(
        same_lsn,
        Or(
            less_than("kafka_partition", partition),
            And(equal_to("kafka_partition", partition), less_than("kafka_offset", offset)),
        ),
    )
    if lsn == -1:
        return earlier_in_lsn
    return Or(Or(is_null("change_lsn"), less_than("change_lsn", lsn)), earlier_in_lsn)


def _truncated_marks(table, truncate, applied_keys: pa.Table, key: list[str], wanted: pa.Schema) -> pa.Table:
    """Soft deletes: the rows a truncate empties stay, marked (deleted_at kept where set), except those of
    keys this commit gives a newer row."""
    rows = table.scan(row_filter=_older_than(truncate), selected_fields=tuple(wanted.names)).to_arrow()
    if rows.num_rows == 0:
        return wanted.empty_table()
    rows = rows.select(wanted.names).cast(wanted)
    if applied_keys.num_rows:
        marked = applied_keys.append_column("_applied", pa.array([True] * applied_keys.num_rows))
        rows = rows.join(marked, key, join_type="left outer")
        rows = rows.filter(pc.is_null(rows["_applied"])).drop_columns(["_applied"]).select(wanted.names)
    now = pa.scalar(datetime.now(UTC), UTC_MICROS)
    deleted_at = pc.if_else(pc.is_valid(rows["deleted_at"]), rows["deleted_at"], now)
    return rows.set_column(rows.schema.get_field_index("deleted_at"), "deleted_at", deleted_at)


# --- rows


def _rows(changes: pa.Table, wanted: pa.Schema, batch_id: str) -> pa.Table:
    """The state rows of changes (their image, position and coordinates; deleted_at NULL)."""
    n = changes.num_rows
    columns = []
    for f in wanted:
        if f.name == "batch_id":
            columns.append(pa.array([batch_id] * n, pa.string()))
        elif f.name in changes.column_names:
            columns.append(pc.cast(changes[f.name], f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=wanted)


def _marked(
    deletes: pa.Table, keyed: pa.Table, held: pa.Table, key: list[str], wanted: pa.Schema, batch_id: str
) -> pa.Table:
    """Soft deletes: each deleted key's row stays with its last image (the later of the batch's last c, r
    or u before the delete and the row the table holds; the delete's own image when neither), the delete's
    position, and deleted_at the delete's source time (else its Kafka time)."""
    image_cols = [f.name for f in wanted if f.name not in key and f.name not in dict(POSITION_COLUMNS)
                  and f.name != "deleted_at"]  # fmt: skip
    images = last_changes(keyed.filter(pc.is_in(keyed["change_op"], value_set=pa.array(IMAGE_OPS))), key)
    base = _rows(deletes, wanted, batch_id)
    out = base.to_pylist()
    by_key_batch = {tuple(r[k] for k in key): r for r in images.to_pylist()}
    by_key_held = {tuple(r[k] for k in key): r for r in held.to_pylist()}
    times = deletes["change_ts"].to_pylist()
    kafka_times = deletes["kafka_timestamp"].to_pylist()
    for i, row in enumerate(out):
        k = tuple(row[c] for c in key)
        batch, kept = by_key_batch.get(k), by_key_held.get(k)
        source = batch if batch is not None else kept
        if batch is not None and kept is not None and _place_of(kept) > _place_of(batch):
            source = kept
        if source is not None:
            for c in image_cols:
                row[c] = source.get(c)
        row["deleted_at"] = times[i] or kafka_times[i] or datetime.now(UTC)
    return pa.Table.from_pylist(out, schema=wanted)


def _place_of(row: dict) -> tuple[int, int, int]:
    lsn = row.get(_LSN, row.get("change_lsn"))
    return (-1 if lsn is None else lsn, row["kafka_partition"], row["kafka_offset"])


# --- TOAST


def _unchanged_names(literal: str | None) -> list[str]:
    """The columns a change_unchanged literal ({"a","b"}) names."""
    if not literal:
        return []
    return [n.strip().strip('"') for n in literal.strip("{}").split(",") if n.strip()]


def _old_keys(changes: pa.Table, schema: RecordSchema) -> list[dict]:
    """The old keys (change_old_key) of changes, as typed key values."""
    found = []
    columns = {c.name: c for c in declared(schema)}
    for text in changes["change_old_key"].to_pylist():
        old = _old_key(text, schema.primary_key, columns)
        if old is not None:
            found.append(old)
    return found


def _old_key(text: str | None, key: tuple[str, ...], columns: Mapping) -> dict | None:
    from eosflow.schema.types import BAD

    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    typed = {k: columns[k].type.accept(doc.get(k)) for k in key}
    return None if any(v is None or v is BAD for v in typed.values()) else typed


def fill_unchanged(
    changes: pa.Table,
    held: pa.Table,
    schema: RecordSchema,
    tombstones: pa.Table | None = None,
    truncate: tuple[int, int, int] | None = None,
) -> tuple[pa.Table, pa.Table]:
    """The changes with every column Debezium left out (change_unchanged) filled with the value the row had:
    that of the key's latest earlier c, r or u (in the batch, or the row the table holds), or, for the
    create that follows a primary-key update, the old key's as the move's delete found it (_moved_from:
    never the new key's former row); a chain in the batch (a key moved twice, a moved key updated) is
    filled link by link, in the source's order. Only changes with placeholders are visited (Python: they
    are few).

    A change none of them holds the value for (the key moved from a row deleted in an earlier run, or
    from a partition that has not delivered the move's delete yet; a key the table has no row for) is
    taken out and returned as rejected (REJECTED's columns), so the key keeps its row and a later change
    of it cannot fill from it; unless the change is not newer than what its key holds (its row, its
    `tombstones` place, the `truncate`): not applied anyway, it stays, to be counted as any older change.
    Returns the changes kept and those rejected."""
    key = schema.primary_key
    columns = {c.name: c for c in declared(schema)}
    ordered = changes.sort_by([(c, "ascending") for c in _ORDER])
    rows = ordered.to_pylist()
    earlier: dict[tuple, list[dict]] = {}  # key -> its c/r/u changes visited so far, in order
    held_rows = {tuple(r[k] for k in key): r for r in held.to_pylist()}
    dead = [] if tombstones is None else tombstones.to_pylist()
    tombstoned = {tuple(r[k] for k in key): _place_of(r) for r in dead}
    # What each key holds: its row's place, else its tombstone's.
    holds = tombstoned | {k: _place_of(r) for k, r in held_rows.items()}
    deletes: dict[tuple, list[tuple]] = {}  # key -> the places of its deletes in the batch
    for row in rows:
        if row["change_op"] == "d":
            deletes.setdefault(tuple(row[c] for c in key), []).append(_place_of(row))
    kept, rejected = [], []
    unknown: set[tuple] = set()  # keys whose latest image was rejected: nothing earlier is their value
    for row in rows:
        k = tuple(row[c] for c in key)
        names = _unchanged_names(row["change_unchanged"])
        if names:
            old = _old_key(row["change_old_key"], key, columns) if row["change_op"] == "c" else None
            place = _place_of(row)
            why = "none"
            if old is None:
                candidates = [] if k in unknown else [*earlier.get(k, [])[-1:], *_live(held_rows.get(k))]
                candidates = [c for c in candidates if _place_of(c) < place]
            else:
                o = tuple(old[c] for c in key)
                found = _moved_from(o, place, earlier, held_rows, deletes, tombstoned)
                candidates, why = ([] if o in unknown else found[0]), found[1]
            source = max(candidates, key=_place_of) if candidates else None
            newer = (k not in holds or place > holds[k]) and (truncate is None or place > truncate)
            if source is None and newer:
                rejected.append({**row, "error": _unfillable(names, old, why)})
                unknown.add(k)
                continue
            if source is None:  # older than what the key holds: kept to be counted, never a source
                kept.append(row)
                continue
            for name in names:
                row[name] = source.get(name)
            row["change_unchanged"] = None
        kept.append(row)
        if row["change_op"] in IMAGE_OPS:
            earlier.setdefault(k, []).append(row)
            unknown.discard(k)
    out = pa.Table.from_pylist(kept, schema=ordered.schema)
    return out, pa.Table.from_pylist([{n: r[n] for n in REJECTED.names} for r in rejected], schema=REJECTED)


def _live(row: dict | None) -> list[dict]:
    """The held row as a source of values: not a soft delete's or truncate's marked row (a key that
    changes after it was created again by a change this batch lacks: the marked image is an earlier
    row's)."""
    return [] if row is None or row["change_op"] == "d" or row.get("deleted_at") is not None else [row]


def _halves(delete: tuple[int, int, int], create: tuple[int, int, int]) -> bool:
    """Whether a delete at place `delete` can be the first half of the primary-key update whose create is
    at `create`: Debezium sends both halves at the update's one LSN (an earlier delete of the key is
    another change: the key was created again since, maybe in a partition not read yet); without LSNs,
    any delete before it."""
    return delete[0] == create[0] if delete[0] >= 0 and create[0] >= 0 else delete < create


def _moved_from(
    old: tuple,
    place: tuple[int, int, int],
    earlier: Mapping[tuple, list[dict]],
    held_rows: Mapping[tuple, dict],
    deletes: Mapping[tuple, list[tuple]],
    tombstoned: Mapping[tuple, tuple],
) -> tuple[list[dict], str]:
    """Where the create at `place` of a key moved from `old` takes its unchanged values: the old key's
    image as the move's delete (_halves) found it, and why there is none. The delete must be in the batch
    (the images before it, in the batch or the held row). Committed by an earlier run, it left no image
    to trust: none with hard deletes, and a soft delete's marked row is the delete's own image when the
    key's last one was unknown then (a key read first by its delete, or whose last change was rejected),
    which cannot be told apart. Not read yet, the old key's partition is behind this one, and the row the
    table holds for it may be older than the row that moved (a catch-up takes each partition's range on
    its own)."""
    before = [d for d in deletes.get(old, []) if _halves(d, place)]
    if before:
        delete = max(before)
        images = [e for e in earlier.get(old, []) if _place_of(e) < delete]
        held = _live(held_rows.get(old))
        return [*images[-1:], *[h for h in held if _place_of(h) < delete]], "gone"
    held_row = held_rows.get(old)
    if held_row is not None and (_halves(_place_of(held_row), place) or _place_of(held_row) > place):
        return [], "gone"  # the move's delete marked it (soft), or the key changed since: the row is gone
    if old in tombstoned and (_halves(tombstoned[old], place) or tombstoned[old] > place):
        return [], "gone"
    return [], "behind"


def _unfillable(names: list[str], old: dict | None, why: str) -> str:
    """Why a change whose unchanged TOAST columns nothing holds is rejected (the Kafka sink's wording)."""
    if old is not None and why == "behind":
        return (
            f"unchanged TOAST column(s) {names} of a key moved from key {json.dumps(old, default=str)}, "
            "whose partition has not delivered the move's delete yet (it is behind this one): the values "
            f"the row held when it moved are not known. {REPLICA_IDENTITY_FULL}"
        )
    if old is not None:
        return (
            f"unchanged TOAST column(s) {names} of a key moved from key {json.dumps(old, default=str)}, "
            "whose row as it moved is not in the table (an earlier run deleted it, or it was never read): "
            f"their values are not in the table. {REPLICA_IDENTITY_FULL}"
        )
    return (
        f"unchanged TOAST column(s) {names}: the key holds no row in the table to take their values from. "
        f"{REPLICA_IDENTITY_FULL}"
    )


# --- tombstones


def _tombstones(table, key: list[str]) -> pa.Table:
    """The hard-deleted keys and the places that deleted them (empty when there are none)."""
    import pyarrow.parquet as pq

    stored = table.properties.get(TOMBSTONES)
    uri = None if stored is None else json.loads(stored).get("file")
    current = table_schema(table)
    schema = pa.schema(
        [current.field(k) for k in key] + [("change_lsn", pa.int64()), ("kafka_partition", pa.int32()),
                                           ("kafka_offset", pa.int64())]
    )  # fmt: skip
    if not uri:
        return schema.empty_table()
    with table.io.new_input(uri).open() as f:
        held = pq.read_table(f)
    # Written under the key's type of its day: a key widened since (int to long) is read as it is now.
    return held.select(schema.names).cast(schema)


def _new_tombstones(
    table,
    tombstones: pa.Table,
    deletes: pa.Table,
    images: pa.Table,
    truncate: tuple[int, int, int] | None,
    key: list[str],
    batch_id: str,
) -> dict[str, str]:
    """The tombstones after this commit (its hard-deleted keys in, keys it created again out, those a
    truncate covers out), written to a new file when they changed; the property naming it."""
    import pyarrow.parquet as pq

    from eosflow.sinks.iceberg.names import name_part

    columns = [*key, "change_lsn", "kafka_partition", "kafka_offset"]
    kept = tombstones.select(columns)
    gone = pa.concat_tables([deletes.select(key), images.select(key)])
    changed = deletes.num_rows > 0
    if gone.num_rows and kept.num_rows:
        unique = gone.group_by(key, use_threads=False).aggregate([])
        flag = unique.append_column("_gone", pa.array([True] * unique.num_rows))
        joined = kept.join(flag, key, join_type="left outer")
        stay = pc.is_null(joined["_gone"])
        changed = changed or not pc.all(stay).as_py()
        kept = joined.filter(stay).select(columns)
    if truncate is not None and kept.num_rows:
        stay = _after(
            (pc.fill_null(kept["change_lsn"], -1), kept["kafka_partition"], kept["kafka_offset"]),
            _constant(truncate, kept.num_rows),
        )
        changed = changed or not pc.all(stay).as_py()
        kept = kept.filter(stay)
    if not changed:
        return {}
    merged = pa.concat_tables([kept, deletes.select(columns).cast(kept.schema)])
    if merged.num_rows == 0:
        return {TOMBSTONES: json.dumps({"file": None, "keys": 0})}
    name = f"{name_part(batch_id)}-{uuid.uuid4().hex[:12]}.parquet"
    uri = f"{table.location().rstrip('/')}/{TOMBSTONE_FOLDER}/{name}"
    with table.io.new_output(uri).create(overwrite=False) as out:
        pq.write_table(merged, out)
    return {TOMBSTONES: json.dumps({"file": uri, "keys": merged.num_rows})}


def tombstone_file(table) -> str | None:
    """The tombstone file the table's current properties name (maintenance keeps it)."""
    stored = table.properties.get(TOMBSTONES)
    return None if stored is None else json.loads(stored).get("file")
