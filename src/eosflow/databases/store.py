"""The members discovery found, kept in the warehouse (eosflow.members; migration 013).

Only psycopg here: eosflow.pipelines reads a member through it when a pipeline's name is not in the file,
so it must not import the declaration's parser back.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from eosflow.databases.schema_block import TableShape


@dataclass(frozen=True)
class Member:
    entry: str
    member: str
    topic: str
    source_schema: str
    source_table: str
    shape: TableShape


_COLUMNS = "entry, member, topic, source_schema, source_table, shape"


def members(conn: psycopg.Connection, entry: str) -> list[Member]:
    rows = conn.execute(
        f"select {_COLUMNS} from eosflow.members where entry = %s order by member", (entry,)
    ).fetchall()
    return [_member(r) for r in rows]


def member(conn: psycopg.Connection, entry: str, name: str) -> Member | None:
    row = conn.execute(
        f"select {_COLUMNS} from eosflow.members where entry = %s and member = %s", (entry, name)
    ).fetchone()
    return None if row is None else _member(row)


def _member(row: tuple) -> Member:
    entry, name, topic, schema, table, shape = row
    return Member(entry, name, topic, schema, table, TableShape.from_json(shape))


def save(conn: psycopg.Connection, found: Member) -> str:
    """Record `found` (in the caller's transaction): "new", "changed" or "unchanged"."""
    held = conn.execute(
        "select shape, member from eosflow.members where entry = %s and topic = %s for update",
        (found.entry, found.topic),
    ).fetchone()
    body = found.shape.as_json()
    if held is not None and held[0] == body and held[1] == found.member:
        return "unchanged"
    conn.execute(
        f"insert into eosflow.members ({_COLUMNS}) values (%s, %s, %s, %s, %s, %s) "
        "on conflict (entry, topic) do update set member = excluded.member, shape = excluded.shape, "
        "changed_at = now()",
        (found.entry, found.member, found.topic, found.source_schema, found.source_table, Jsonb(body)),
    )
    return "new" if held is None else "changed"
