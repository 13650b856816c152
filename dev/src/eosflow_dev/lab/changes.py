"""The lab's change stream: a customers table's changes as Debezium sends them, and the replica judged
against the source table those changes describe (docs/DESIGN.md, "Delivery modes", on a change stream).

The changes are the change bench's (eosflow_dev.bench.change_load: inserts, 70% updates, 10% deletes each
followed by its tombstone, re-inserts; `source.lsn` strictly increasing; JsonConverter without the schema
block), keyed `{"id": n}`, produced in Kafka transactions of which some abort, as the lab's orders are.
A change's id is its LSN. The source table is the model applied to the committed changes alone: each key's
last committed change, its image if an insert or update, nothing if a delete. Nothing here reads eosflow's
ledger: the changelog is counted against the committed changes, the state table compared with the source.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql

from eosflow_dev.bench import change_load
from eosflow_dev.produce.events import Event
from eosflow_dev.produce.manifest import VISIBLE, Manifest
from eosflow_dev.produce.producer import EventProducer, produce_stream

TOMBSTONE = "~"  # a tombstone's event id: its delete's LSN and this, so the tally leaves it out
COLUMNS = change_load.DECLARED_COLUMNS  # the customers table as the change bench declares it
Image = tuple[str, Decimal | None, int | None, Any]  # email, balance, updated_at (us since 1970), profile


@dataclass
class ChangeManifest(Manifest):
    """The producer's manifest (a row per record, the tombstones too) and every change it sent, by id."""

    changes: dict[str, tuple[str, change_load.Row]] = field(default_factory=dict)  # lsn -> (op, row)

    def committed_changes(self) -> Manifest:
        """The manifest of the changes alone (no tombstones): what the changelog is counted against."""
        rows = [r for r in self.rows if not r.event_id.endswith(TOMBSTONE)]
        return Manifest(self.topic, self.settings, rows, self.summary_extra)

    def source_table(self) -> dict[int, Image]:
        """The source table the committed changes leave: each key's last committed change by LSN."""
        visible = [r.event_id for r in self.rows if r.status in VISIBLE and r.event_id in self.changes]
        return source_table(self.changes[eid] for eid in sorted(visible, key=int))


def source_table(changes: Iterable[tuple[str, change_load.Row]]) -> dict[int, Image]:
    """The table after `changes` (op, row), in the source's order."""
    table: dict[int, Image] = {}
    for op, (key, email, balance, at_us, profile) in changes:
        if op == "d":
            table.pop(key, None)
        else:
            table[key] = (email, Decimal(balance), at_us, json.loads(profile))
    return table


def keys_for(changes: int) -> int:
    """Keys for `changes` changes in the bench's mix, as few as leave room for a re-insert per two deletes."""
    updates, deletes = round(changes * change_load.UPDATES), round(changes * change_load.DELETES)
    keys = changes - updates - deletes - deletes // 2
    if keys < 1:
        raise ValueError(
            f"a change stream needs at least 10 changes, not {changes}: use --records 10 or more"
        )
    change_load.plan_counts(changes, keys)  # raises if the mix does not fit
    return keys


def events(changes: int, seed: int, sent: dict[str, tuple[str, change_load.Row]]) -> Iterator[Event]:
    """Each change as Debezium writes it, a delete followed by its tombstone; `sent` gains each change."""
    previous = change_load.FIRST_LSN
    for i, (op, row, lsn) in enumerate(change_load.generate(changes, keys_for(changes), seed, {})):
        key = b'{"id":%d}' % row[0]
        sent[str(lsn)] = (op, row)
        yield Event(str(lsn), key, change_load.envelope(op, row, lsn, previous, 700 + i // 3))
        previous = lsn
        if op == "d":
            yield Event(f"{lsn}{TOMBSTONE}", key, None)


def produce(producer: EventProducer, changes: int, seed: int) -> ChangeManifest:
    """Produce the changes through `producer` (transactions, some aborted); the manifest and the model."""
    sent: dict[str, tuple[str, change_load.Row]] = {}
    m = produce_stream(producer, events(changes, seed, sent), seed)
    return ChangeManifest(m.topic, m.settings, m.rows, m.summary_extra, sent)


@dataclass(frozen=True)
class Replica:
    """The state table against the source table, key by key."""

    missing: int  # live in the source, absent from the state table
    stale: int  # present in both, some column differs
    extra: int  # deleted in (or never in) the source, present in the state table

    @property
    def differs(self) -> int:
        return self.missing + self.stale + self.extra


def compare(source: Mapping[int, Image], replica: Mapping[int, Image]) -> Replica:
    return Replica(
        missing=sum(1 for k in source if k not in replica),
        stale=sum(1 for k, row in source.items() if k in replica and replica[k] != row),
        extra=sum(1 for k in replica if k not in source),
    )


def read_state(conn: psycopg.Connection, table: str) -> dict[int, Image]:
    """The state table's rows, as the source model holds them (psycopg's types; an instant in us)."""
    if not conn.execute("select to_regclass(%s) is not null", (table,)).fetchone()[0]:
        return {}
    rows = conn.execute(
        sql.SQL("select id, email, balance, updated_at, profile from {}").format(
            sql.Identifier(*table.split("."))
        )
    ).fetchall()
    return {key: (email, balance, _micros(at), profile) for key, email, balance, at, profile in rows}


def changelog_ids(conn: psycopg.Connection, table: str) -> list[str]:
    """The LSN of every change row of the changelog (its tombstones, op '-', have none)."""
    if not conn.execute("select to_regclass(%s) is not null", (table,)).fetchone()[0]:
        return []
    query = sql.SQL("select change_lsn from {} where change_op <> '-'").format(
        sql.Identifier(*table.split("."))
    )
    return [str(lsn) for (lsn,) in conn.execute(query)]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(at: datetime | None) -> int | None:
    if at is None:
        return None
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
