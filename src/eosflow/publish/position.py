"""A publisher's position in its outbox, and where at_least_once stores it: eosflow.publish_positions, after
the batch was produced. exactly_once keeps it in Kafka instead, in the batch's own transaction
(eosflow.publish.offsets); either way the value is a Position.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

    from eosflow.publish.declaration import Publisher


@dataclass(frozen=True)
class Position:
    """The last row published: its inserting transaction's id and its id column's value, as text."""

    xid: int
    id: str

    def to_json(self) -> str:
        return json.dumps({"xid": self.xid, "id": self.id})

    @classmethod
    def from_json(cls, text: str | bytes) -> Position:
        body = json.loads(text)
        return cls(int(body["xid"]), str(body["id"]))


def read_stored(conn: psycopg.Connection, publisher: Publisher) -> Position | None:
    """at_least_once: the position stored in Postgres after the last batch was produced."""
    row = conn.execute(
        "select xid, id from eosflow.publish_positions where publisher = %s and shard = %s",
        (publisher.name, publisher.shard),
    ).fetchone()
    return Position(row[0], row[1]) if row else None


def store(conn: psycopg.Connection, publisher: Publisher, pos: Position) -> None:
    conn.execute(
        "insert into eosflow.publish_positions (publisher, shard, xid, id) values (%s, %s, %s, %s) "
        "on conflict (publisher, shard) do update set xid = excluded.xid, id = excluded.id, "
        "updated_at = now()",
        (publisher.name, publisher.shard, pos.xid, pos.id),
    )
