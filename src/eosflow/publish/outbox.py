"""The source of a publisher: an outbox table read in the order its rows were committed.

Sequence and identity values are taken when a row is inserted, not when it commits, so polling
`id > last_id` skips a row whose transaction commits after a later one was read. The position here
only covers finished work: every row carries the id of the transaction that inserted it
(`eosflow_xid xid8 default pg_current_xact_id()`), and a read takes only rows whose transaction id is
below the xmin of its own snapshot: every transaction below xmin has finished, so no row can appear
later behind the position. Rows are read in (eosflow_xid, id) order; the position is the last pair,
so the id column must be NOT NULL and unique (checked before anything is published).

A row becomes one JSON object. Values JSON has a form for are written in it: instants and dates in ISO
8601 (and Postgres's own `infinity`, `-infinity`), intervals in ISO 8601 (P1M2DT3H), network addresses
and UUIDs as text, ranges as {"lower", "upper", "bounds"}, numerics exact. A NaN or an infinite number
has none: the row is Unpublishable, and the publisher sends it to its dead-letter topic with the reason.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.datetime import DateLoader, TimestampLoader, TimestamptzLoader
from psycopg.types.range import Range
from psycopg.types.string import TextLoader

from eosflow.errors import PipelineConfigError
from eosflow.publish.position import Position
from eosflow.rows import one_row
from eosflow.schema.arrow import json_text

if TYPE_CHECKING:  # typed only: the sources sit below the declarations (tests/unit/project/test_layers.py)
    from eosflow.publish.declaration import Publisher

# An outbox row as psycopg's dict_row reads it: its columns by name, the publisher's own table's.
OutboxRow = dict[str, Any]
XID_COLUMN = "eosflow_xid"


def prepare(
    conn: psycopg.Connection,
    publisher: Publisher,
    log: Callable[[str], None] = print,
) -> str:
    """Check the outbox, and give it the position column (and its index) if it has none yet; record it as
    this publisher's, for the count of its waiting rows the Airflow view asks for (eosflow.outbox_waiting).

    Returns the id column's type. Rows that exist when the column is added get the id of the
    transaction that adds it: they are published as if inserted then.
    """
    schema, table = publisher.table.split(".")
    columns: dict[str, str] = dict(
        conn.execute(
            "select attname, format_type(atttypid, atttypmod) from pg_attribute "
            "where attrelid = to_regclass(%s) and attnum > 0 and not attisdropped",
            (publisher.table,),
        ).fetchall()
    )
    if not columns:
        raise PipelineConfigError(
            f"publisher {publisher.name!r}: no table {publisher.table} in the warehouse"
        )
    for what, column in (("id", publisher.id_column), ("key", publisher.key_column)):
        if column is not None and column not in columns:
            raise PipelineConfigError(
                f"publisher {publisher.name!r}: {what} column {column!r} is not a column of "
                f"{publisher.table} ({', '.join(sorted(columns))})"
            )
    _refuse_an_id_that_can_repeat(conn, publisher)
    if XID_COLUMN not in columns:
        statements = [
            sql.SQL("alter table {} add column {} xid8 not null default pg_current_xact_id()").format(
                sql.Identifier(schema, table), sql.Identifier(XID_COLUMN)
            ),
            sql.SQL("create index {} on {} ({}, {})").format(
                sql.Identifier(f"{table}_{XID_COLUMN}"[:63]),
                sql.Identifier(schema, table),
                sql.Identifier(XID_COLUMN),
                sql.Identifier(publisher.id_column),
            ),
        ]
        try:
            with conn.transaction():
                # The ALTER waits for every open transaction on the table, and every writer queues
                # behind it: give up quickly rather than stall the application's inserts.
                conn.execute("set local lock_timeout = '5s'")
                for statement in statements:
                    conn.execute(statement)
        except psycopg.errors.LockNotAvailable:
            text = "; ".join(s.as_string(conn) for s in statements)
            raise PipelineConfigError(
                f"publisher {publisher.name!r}: {publisher.table} has no {XID_COLUMN} column, and adding "
                "it waited 5 s for the table's open transactions. Nothing was changed. Add it when the "
                f"table is quiet, or in the outbox's own migration: {text}"
            ) from None
        log(f"added {XID_COLUMN} (the inserting transaction's id) and its index to {publisher.table}")
    elif columns[XID_COLUMN] != "xid8":
        raise PipelineConfigError(f"{publisher.table}.{XID_COLUMN} is {columns[XID_COLUMN]}, not xid8")
    _record(conn, publisher, log)
    return columns[publisher.id_column]


def _record(conn: psycopg.Connection, publisher: Publisher, log: Callable[[str], None]) -> None:
    """Record which table is this publisher's outbox: the view's read-only role counts its waiting rows
    through eosflow.outbox_waiting, which looks the table up here (the reader names a publisher, and may
    read no outbox)."""
    if one_row(conn.execute("select to_regclass('eosflow.publishers') is null"))[0]:
        log(
            f"publisher {publisher.name}: eosflow's migrations have not run on this warehouse: the view "
            "cannot count its waiting rows until they have (`eosflow publish` applies them)"
        )
        return
    schema, table = publisher.table.split(".")
    conn.execute(
        "insert into eosflow.publishers (publisher, outbox_schema, outbox_table) values (%s, %s, %s) "
        "on conflict (publisher) do update set outbox_schema = excluded.outbox_schema, "
        "outbox_table = excluded.outbox_table, recorded_at = now() "
        "where (publishers.outbox_schema, publishers.outbox_table) "
        "is distinct from (excluded.outbox_schema, excluded.outbox_table)",
        (publisher.name, schema, table),
    )


def _refuse_an_id_that_can_repeat(conn: psycopg.Connection, publisher: Publisher) -> None:
    """The position is (transaction id, id): a NULL id cannot be compared, and two rows of one id in one
    transaction would leave the second behind. Refused before anything is published."""
    not_null, unique = one_row(
        conn.execute(
            "select a.attnotnull, exists (select 1 from pg_index i where i.indrelid = a.attrelid "
            "and i.indisunique and i.indnkeyatts = 1 and i.indkey[0] = a.attnum and i.indpred is null) "
            "from pg_attribute a where a.attrelid = to_regclass(%s) and a.attname = %s",
            (publisher.table, publisher.id_column),
        )
    )
    if not_null and unique:
        return
    table, column = sql.Identifier(*publisher.table.split(".")), sql.Identifier(publisher.id_column)
    fixes = (
        [] if not_null else [sql.SQL("alter table {} alter column {} set not null").format(table, column)]
    ) + ([] if unique else [sql.SQL("create unique index on {} ({})").format(table, column)])
    missing = " and ".join(w for w, ok in (("NOT NULL", not_null), ("unique", unique)) if not ok)
    statements = "; ".join(f.as_string(conn) for f in fixes)
    raise PipelineConfigError(
        f"publisher {publisher.name!r}: id column {publisher.id_column!r} of {publisher.table} is not "
        f"{missing}: a publisher's position is (transaction id, id), and a NULL or repeated id would skip "
        f"rows or stop it. Nothing was published. Make it so ({statements}), "
        "or declare a column that is (a primary key is)"
    )


def committed_after(
    conn: psycopg.Connection, publisher: Publisher, id_type: str, after: Position | None, limit: int
) -> list[OutboxRow]:
    """Up to `limit` rows after `after`, every one from a transaction below this snapshot's xmin."""
    schema, table = publisher.table.split(".")
    query = sql.SQL(
        "select t.*, t.{xid}::text::bigint as {xid} from {table} t "
        "where t.{xid} < pg_snapshot_xmin(pg_current_snapshot()) {after} "
        "order by t.{xid}, t.{id} limit {limit}"
    )
    after_sql = (
        sql.SQL("and (t.{xid}, t.{id}) > (%s::xid8, %s::{type})").format(
            xid=sql.Identifier(XID_COLUMN), id=sql.Identifier(publisher.id_column), type=sql.SQL(id_type)
        )
        if after is not None
        else sql.SQL("")
    )
    statement = query.format(
        xid=sql.Identifier(XID_COLUMN),
        table=sql.Identifier(schema, table),
        after=after_sql,
        id=sql.Identifier(publisher.id_column),
        limit=sql.Literal(limit),
    )
    params = (str(after.xid), after.id) if after is not None else ()
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(statement, params).fetchall()


def has_position_column(conn: psycopg.Connection, publisher: Publisher) -> bool:
    """Whether the outbox has its position column yet (a publisher's first run adds it)."""
    (found,) = one_row(
        conn.execute(
            "select exists (select 1 from pg_attribute where attrelid = to_regclass(%s) and attname = %s "
            "and not attisdropped)",
            (publisher.table, XID_COLUMN),
        )
    )
    return found


def held_back(conn: psycopg.Connection, publisher: Publisher, after: Position | None) -> int:
    """Committed rows after `after` that a read cannot take yet: an older transaction is still open."""
    schema, table = publisher.table.split(".")
    query = sql.SQL(
        "select count(*) from {table} t where t.{xid} >= pg_snapshot_xmin(pg_current_snapshot()) {after}"
    ).format(
        table=sql.Identifier(schema, table),
        xid=sql.Identifier(XID_COLUMN),
        after=sql.SQL("and t.{} > %s::xid8").format(sql.Identifier(XID_COLUMN)) if after else sql.SQL(""),
    )
    return one_row(conn.execute(query, (str(after.xid),) if after else ()))[0]


def blocking_transactions(conn: psycopg.Connection, shown: int = 5) -> list[str]:
    """The oldest transactions open in the cluster (sessions, then prepared ones), as one line each."""
    sessions = conn.execute(
        "select pid, datname, state, extract(epoch from now() - xact_start)::bigint, usename "
        "from pg_stat_activity where backend_xid is not null and pid <> pg_backend_pid() "
        "order by xact_start limit %s",
        (shown,),
    ).fetchall()
    prepared = conn.execute(
        "select gid, database, extract(epoch from now() - prepared)::bigint from pg_prepared_xacts "
        "order by prepared limit %s",
        (shown,),
    ).fetchall()
    return [
        f"pid {pid} (database {db}, user {user}, {state}, open {age}s)"
        for pid, db, state, age, user in sessions
    ] + [f"prepared transaction {gid!r} (database {db}, prepared {age}s ago)" for gid, db, age in prepared]


def position_of(row: OutboxRow, publisher: Publisher) -> Position:
    return Position(int(row[XID_COLUMN]), as_text(row[publisher.id_column]))


class Unpublishable(ValueError):
    """A row holds a value JSON cannot carry; the message says which column and why."""


def row_value(row: OutboxRow) -> bytes:
    """A row as one JSON object, without the position column; Unpublishable for a NaN or infinity."""
    for column, value in row.items():
        if _not_a_json_number(value):
            raise Unpublishable(f"column {column!r} holds {value}, which JSON has no number for")
    return json_text({k: plain_value(v) for k, v in row.items() if k != XID_COLUMN}).encode()


def rejected_value(row: OutboxRow) -> bytes:
    """An unpublishable row as JSON all the same, its NaN and infinities as text, for the dead letter."""
    return json_text(
        {k: str(v) if _not_a_json_number(v) else plain_value(v) for k, v in row.items() if k != XID_COLUMN}
    ).encode()


def row_key(row: OutboxRow, publisher: Publisher) -> bytes | None:
    if publisher.key_column is None or row[publisher.key_column] is None:
        return None
    return as_text(row[publisher.key_column]).encode()


def _not_a_json_number(value: object) -> bool:
    return (isinstance(value, float) and not math.isfinite(value)) or (
        isinstance(value, Decimal) and not value.is_finite()
    )


def as_text(value: object) -> str:
    """A value as the text Postgres reads back as the same value (the position's id, a key)."""
    plain = plain_value(value)
    return plain if isinstance(plain, str) else json_text(plain)


def plain_value(value: object) -> object:
    """A psycopg value as JSON-ready Python: instants as ISO text, bytea as \\x hex, ranges as objects."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(
        value,
        ipaddress.IPv4Address
        | ipaddress.IPv6Address
        | ipaddress.IPv4Interface
        | ipaddress.IPv6Interface
        | ipaddress.IPv4Network
        | ipaddress.IPv6Network,
    ):
        return str(value)
    if isinstance(value, Range):
        if value.isempty:
            return {"empty": True}
        return {"lower": plain_value(value.lower), "upper": plain_value(value.upper), "bounds": value.bounds}
    if type(value) is list:
        return [plain_value(v) for v in value]
    return value


class _Infinite:
    """Loaders that read Postgres's `infinity` and `-infinity` as that text instead of failing the read."""

    def load(self, data):
        if bytes(data) in (b"infinity", b"-infinity"):
            return bytes(data).decode()
        return super().load(data)


class _InfiniteDate(_Infinite, DateLoader):
    pass


class _InfiniteTimestamp(_Infinite, TimestampLoader):
    pass


class _InfiniteTimestamptz(_Infinite, TimestamptzLoader):
    pass


def configure_reads(conn: psycopg.Connection) -> None:
    """On this connection: dates and timestamps at +-infinity load as that text (a row of them publishes),
    and intervals as Postgres's own ISO 8601 text (P1M2DT3H: exact, where a timedelta has no months)."""
    conn.execute("set intervalstyle = 'iso_8601'")
    conn.adapters.register_loader("interval", TextLoader)
    conn.adapters.register_loader("date", _InfiniteDate)
    conn.adapters.register_loader("timestamp", _InfiniteTimestamp)
    conn.adapters.register_loader("timestamptz", _InfiniteTimestamptz)
