"""Discovery: a `database:` entry's table topics found in Kafka, each table's shape read from Debezium's
schema block in its latest records, and the members recorded in the warehouse (store.py).

A table already recorded keeps its shape unless its records now show more columns, or a column's type
widened (the source's ALTER ... TYPE bigint: docs/DESIGN.md, "Declarations that evolve"): more columns
are added as optional columns (the table's earlier records do not hold them), a widened type recorded, and
the member's tables follow on its next run. Any other difference (another type change, the key) is
recorded as the member's conflict, which refuses its runs with the difference named, and leaves its
recorded shape alone (docs/DESIGN.md, "A whole database in one declaration").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from eosflow.databases import store
from eosflow.databases.declaration import Database
from eosflow.databases.schema_block import SchemaBlockError, TableShape, shape
from eosflow.kafka_client import KafkaConfig, admin_client, client_config
from eosflow.schema import evolution

# How far back from a partition's end discovery looks for a change with a value (past tombstones).
_LOOK_BACK = 64
_TIMEOUT_S = 30.0


@dataclass
class Discovery:
    """What one discovery found: per table topic, what happened to its member."""

    entry: str
    outcomes: dict[str, str] = field(default_factory=dict)  # topic -> one line

    def lines(self) -> list[str]:
        if not self.outcomes:
            return [f"{self.entry}: no table topic found yet"]
        return [f"{self.entry}: {topic}: {line}" for topic, line in sorted(self.outcomes.items())]


def discover(
    conn: psycopg.Connection,
    kafka: KafkaConfig,
    database: Database,
    declared: frozenset[str],
    log: Callable[[str], None],
) -> Discovery:
    """Find the entry's table topics, read their shapes, record the members (one transaction each).
    `declared`: the pipelines the file declares, whose names no member may take."""
    found = Discovery(database.name)
    topics = sorted(t for t in _topics(kafka) if database.table_of(t) is not None)
    held = {m.topic: m for m in store.members(conn, database.name)}
    taken = {m.member: m.topic for m in held.values()} | {n: "a pipeline in the file" for n in declared}
    for topic in topics:
        schema, table = database.table_of(topic)  # type: ignore[misc]
        name = database.member_name(schema, table)
        if taken.get(name, topic) != topic:
            found.outcomes[topic] = (
                f"refused: member name {name} is taken by {taken[name]}; name it under members:"
            )
            continue
        try:
            read = _latest_shape(kafka, topic)
        except SchemaBlockError as exc:
            found.outcomes[topic] = f"refused: {exc}"
            continue
        if read is None:
            found.outcomes[topic] = "no change records yet"
            continue
        before = held.get(topic)
        merged, line = _merge(before.shape if before else None, read)
        with conn.transaction():
            store.save(conn, store.Member(database.name, name, topic, schema, table, merged))
        taken[name] = topic
        found.outcomes[topic] = f"member {name}: {line}"
    for line in found.lines():
        log(line)
    return found


def _topics(kafka: KafkaConfig) -> list[str]:
    client, errors = admin_client(kafka)
    metadata = errors.answer(kafka, lambda t: client.list_topics(timeout=t), _TIMEOUT_S)
    return list(metadata.topics)


def _latest_shape(kafka: KafkaConfig, topic: str) -> TableShape | None:
    """The shape the topic's latest change with a value describes (the latest by timestamp among its
    partitions' last records), or None when it holds none yet."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        client_config(
            kafka,
            **{
                "group.id": "eosflow-discovery",  # never committed: assign() and no commits
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            },
        )
    )
    try:
        partitions = consumer.list_topics(topic, timeout=_TIMEOUT_S).topics[topic].partitions
        starts = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=_TIMEOUT_S)
            if high > low:
                starts.append(TopicPartition(topic, p, max(low, high - _LOOK_BACK)))
        if not starts:
            return None
        consumer.assign(starts)
        latest: tuple[int, bytes | None, bytes] | None = None
        done: set[int] = set()
        while len(done) < len(starts):
            message = consumer.poll(_TIMEOUT_S)
            if message is None:
                break
            if message.error():
                partition = message.partition()
                assert partition is not None  # an assigned partition's end or error names it
                done.add(partition)  # the partition's end (or an error: what was read is used)
                continue
            value = message.value()
            if value is not None:
                stamp = message.timestamp()[1]
                if latest is None or stamp >= latest[0]:
                    latest = (stamp, message.key(), value)
        if latest is None:
            return None
        return _shape_of(latest[1], latest[2])
    finally:
        consumer.close()


def _shape_of(key: bytes | None, value: bytes) -> TableShape:
    try:
        body = json.loads(value)
    except ValueError:
        raise SchemaBlockError(
            "its records are not JSON: discovery reads Debezium's JsonConverter schema block (Avro and "
            "Protobuf tables: declare each as a pipeline of its own)"
        ) from None
    if not isinstance(body, dict) or not isinstance(body.get("schema"), dict):
        raise SchemaBlockError(
            "its records carry no schema block: set value.converter.schemas.enable=true and "
            "key.converter.schemas.enable=true on the connector, or declare the table as a pipeline of "
            "its own"
        )
    key_schema = None
    if key is not None:
        try:
            key_body = json.loads(key)
        except ValueError:
            key_body = None
        key_schema = key_body.get("schema") if isinstance(key_body, dict) else None
    return shape(key_schema, body["schema"])


def _merge(before: TableShape | None, read: TableShape) -> tuple[TableShape, str]:
    """The shape to record and a line saying what changed."""
    left = f"; left out: {_left_out(read)}" if read.left_out else ""
    if before is None:
        return read, f"new, {len(read.columns)} columns, primary key {list(read.primary_key)}{left}"
    held = {c["name"]: c for c in before.columns}
    now = {c["name"]: c for c in read.columns}
    changed = [
        n
        for n in held
        if n in now and (held[n]["type"], held[n]["source"]) != (now[n]["type"], now[n]["source"])
    ]
    widened = [
        n
        for n in changed
        if held[n]["source"] == now[n]["source"] and evolution.widens(held[n]["type"], now[n]["type"])
    ]
    differ = [f"{n}: {_spell(held[n])} is now {_spell(now[n])}" for n in changed if n not in widened]
    if read.primary_key != before.primary_key:
        differ.append(f"primary key {list(before.primary_key)} is now {list(read.primary_key)}")
    if differ:
        return (
            TableShape(before.columns, before.primary_key, before.left_out, "; ".join(differ)),
            "refused until a person decides: " + "; ".join(differ),
        )
    # Optional: the table's earlier records do not hold them.
    added = [{k: v for k, v in c.items() if k != "required"} for n, c in now.items() if n not in held]
    left_out = before.left_out | {k: v for k, v in read.left_out.items() if k not in held}
    kept = tuple(dict(c, type=now[c["name"]]["type"]) if c["name"] in widened else c for c in before.columns)
    merged = TableShape(kept + tuple(added), before.primary_key, left_out)
    dropped = [n for n in held if n not in now]
    gone = f"; no longer in the source (kept): {dropped}" if dropped else ""
    wider = "; ".join(f"{n} from {held[n]['type']} to {now[n]['type']}" for n in widened)
    if not added and not widened and left_out == before.left_out and before.conflict is None:
        return before, "unchanged" + gone
    if widened and not added and left_out == before.left_out:
        return merged, f"widened: {wider}" + gone
    return merged, (
        (f"columns added: {[c['name'] for c in added]}" if added else "no column added")
        + (f"; widened: {wider}" if widened else "")
        + gone
        + (f"; left out: {_left_out(read)}" if read.left_out else "")
    )


def _spell(column: dict) -> str:
    return f"{column['type']} from {column['source']}"


def _left_out(read: TableShape) -> str:
    return ", ".join(f"{k} ({v})" for k, v in sorted(read.left_out.items()))
