"""`eosflow verify` for a change stream into a Kafka sink: the compacted output topic is the state.

Read back read_committed, as a downstream consumer would: the source records of the ledger's committed
ranges, re-checked as changes (eosflow.schema.changes), and the output and dead-letter topics. Per output
partition, each key's last record must be the key's last change among the committed ranges that is not
in the dead-letter topic (superseded, or rejected for another reason): its position, its source
coordinates, a tombstone for a delete, and for JSON values every column the change carried. Every source
record is accounted for: in the output or the dead-letter topic once, a Debezium tombstone (which produces
nothing), or a change compaction removed (its key's last record is newer). Failures name keys and offsets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import msgspec

from eosflow.schema.changes import TOMBSTONE, ChangeCheck
from eosflow.settings import Settings
from eosflow.sinks.kafka.output import output_of
from eosflow.sinks.kafka.produce import SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
from eosflow.sinks.kafka.state import (
    OP_HEADER,
    POSITION_HEADER,
    PartitionState,
    Position,
    is_newer,
    parse_position,
    position_of,
    position_text,
)
from eosflow.sinks.kafka.verify import (
    SHOWN,
    Coordinates,
    Finding,
    KafkaVerifyResult,
    _expired,
    _log_starts,
    _show,
    committed,
    once_and_nothing_else,
)
from eosflow.sinks.protocol import Pipeline
from eosflow.sources.kafka.range_read import headers_json
from eosflow.sources.kafka.read_back import partitions_of, read_to_end

_RAW_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])


@dataclass(frozen=True)
class Change:
    """A committed range's change that should be in the output: where it came from and what it holds."""

    source: Coordinates
    position: Position
    op: str
    image: list
    unchanged: tuple[str, ...]


@dataclass(frozen=True)
class Last:
    """A key's last record in an output partition."""

    offset: int
    source: Coordinates | None
    position: Position | None
    op: str | None
    value: bytes | None


def verify_state_topic(settings: Settings, pipeline: Pipeline) -> KafkaVerifyResult:
    sink = output_of(pipeline)
    ranges, written, rejected = committed(settings, pipeline)
    state = PartitionState(pipeline.schema)  # for its key encoding and JSON images only
    check = ChangeCheck(pipeline.schema, pipeline.max_value_bytes, settings.registry)
    output_seen: Counter = Counter()
    last: dict[tuple[int, bytes], Last] = {}
    output = [(sink.output_topic, p, -2) for p in partitions_of(settings.kafka, sink.output_topic)]
    for m in read_to_end(settings.kafka, output):
        h = dict(m.headers() or [])
        source = _source(h)
        output_seen[source or (f"(no source headers: {sink.output_topic})", m.partition(), m.offset())] += 1
        op = h.get(OP_HEADER)
        last[(m.partition(), m.key() or b"")] = Last(
            m.offset(),
            source,
            parse_position(h.get(POSITION_HEADER)),
            op.decode() if op is not None else None,
            m.value(),
        )
    dead_topic = sink.dead_letter_topic
    dead = Counter(
        _source(dict(m.headers() or [])) or (f"(no source headers: {dead_topic})", m.partition(), m.offset())
        for m in read_to_end(
            settings.kafka, [(dead_topic, p, -2) for p in partitions_of(settings.kafka, dead_topic)]
        )
    )

    source_records: set[Coordinates] = set()
    tombstones: set[Coordinates] = set()
    expected: dict[tuple[int, bytes], Change] = {}
    changes: dict[Coordinates, tuple[int, bytes, Position]] = {}
    for m, coordinates in _source_records(settings.kafka, ranges):
        source_records.add(coordinates)
        headers = m.headers()
        error, typed = check(m.key(), m.value(), headers_json(headers) if headers else None)
        if error is not None or coordinates in dead:
            continue
        assert typed is not None  # a change that passed has its typed columns
        image, (op, lsn, _ts, unchanged, _old) = typed[: state.width], typed[state.width : state.width + 5]
        if op == TOMBSTONE:
            tombstones.add(coordinates)
            continue
        if op == "t":
            continue
        key = (m.partition(), state.key_of(image))
        position = position_of(lsn, m.partition(), m.offset())
        changes[coordinates] = (*key, position)
        held = expected.get(key)
        if held is None or is_newer(position, held.position):
            expected[key] = Change(coordinates, position, op, image, tuple(unchanged or ()))

    found = output_seen + dead

    def compacted_away(p: int, k: bytes, position: Position) -> bool:
        """A change whose record compaction removed: its key's last record is newer, or the key's last
        change is a delete whose tombstone went too (after the topic's delete.retention.ms)."""
        held = last.get((p, k))
        if held is None:
            return expected[(p, k)].op == "d"
        return held.position is not None and is_newer(held.position, position)

    compacted = {
        c for c, (p, k, position) in changes.items() if c not in found and compacted_away(p, k, position)
    }
    lost = sorted(source_records - found.keys() - tombstones - compacted)
    twice = sorted(k for k, n in found.items() if n > 1)
    log_start = _log_starts(settings.kafka, {t for t, *_ in ranges})
    expired = {k for k in found if k not in source_records and _expired(k, ranges, log_start)}
    foreign = sorted(k for k in found if k not in source_records and k not in expired)
    wrong = _wrong_last_records(expected, last, state, sink.output_format == "json", expired)
    # Retention deleted part of a committed range: its records cannot be counted from the source.
    shortened = any(start < log_start.get((t, p), 0) for t, p, start, _ in ranges)
    name = sink.output_topic
    checks = (
        Finding(
            "every source record is accounted for",
            not lost,
            f"{len(source_records):,} source records in {len(ranges)} committed ranges: "
            f"{sum(output_seen.values()):,} in {name}, {sum(dead.values()):,} in {sink.dead_letter_topic}, "
            f"{len(tombstones):,} Debezium tombstones, {len(compacted):,} compacted away"
            + (f"; {len(lost):,} missing, e.g. {_show(lost)}" if lost else "")
            + (
                f"; {len(expired):,} more below the log start: checked against the committed ranges only"
                if expired
                else ""
            ),
        ),
        *once_and_nothing_else(twice, foreign),
        Finding(
            "each key's last record is its last change",
            not wrong,
            f"{len(expected):,} keys in {len({p for p, _ in expected})} partition(s)"
            + (f"; {len(wrong):,} wrong: " + "; ".join(wrong[:SHOWN]) if wrong else ""),
        ),
        Finding(
            "the ledger's counts match the topics",
            rejected == sum(dead.values())
            and (
                written + rejected >= len(source_records)
                if shortened
                else written + rejected == len(source_records)
            ),
            f"ledger {written:,} written + {rejected:,} rejected; {len(source_records):,} source records "
            f"read{' (retention deleted some: at least)' if shortened else ''}, {sink.dead_letter_topic} has "
            f"{sum(dead.values()):,}",
        ),
    )
    return KafkaVerifyResult(pipeline.name, checks)


def _wrong_last_records(
    expected: Mapping[tuple[int, bytes], Change],
    last: Mapping[tuple[int, bytes], Last],
    state: PartitionState,
    json_values: bool,
    expired: set[Coordinates],
) -> list[str]:
    """What differs between each key's last output record and its last change, naming key and offset."""
    wrong = []
    for (partition, key), change in sorted(expected.items()):
        shown = f"key {key.decode('utf-8', 'replace')} in partition {partition}"
        record = last.get((partition, key))
        want = f"the change at {_coordinates(change.source)} (position {position_text(change.position)})"
        if record is None:
            if change.op != "d":  # a delete's tombstone goes after delete.retention.ms, and the key with it
                wrong.append(f"{shown}: no record, expected {want}")
            continue
        at = f"{shown}: the record at offset {record.offset}"
        if record.source != change.source or record.position != change.position:
            got = _coordinates(record.source) if record.source else "no source"
            pos = position_text(record.position) if record.position else "none"
            wrong.append(f"{at} names {got} (position {pos}), expected {want}")
        elif (record.value is None) != (change.op == "d"):
            wrong.append(
                f"{at} is {'a tombstone' if record.value is None else 'a row'}, its change is op {change.op}"
            )
        elif json_values and record.value is not None:
            differing = _differing(record.value, change, state)
            if differing:
                wrong.append(f"{at} differs from {want} in {differing}")
    for (partition, key), record in sorted(last.items()):
        # A key whose last change retention deleted from the source: only its range can be checked (above).
        if (partition, key) not in expected and record.value is not None and record.source not in expired:
            wrong.append(
                f"key {key.decode('utf-8', 'replace')} in partition {partition}: the record at offset "
                f"{record.offset} holds a row no committed change left"
            )
    return wrong


def _differing(value: bytes, change: Change, state: PartitionState) -> list[str]:
    try:
        got = _RAW_OBJECT.decode(value)
    except msgspec.DecodeError:
        return ["(not a JSON object)"]
    want = _RAW_OBJECT.decode(state.encode(change.image))
    return [n for n in state.names if n not in change.unchanged and got.get(n) != want.get(n)]


def _coordinates(c: Coordinates) -> str:
    return f"{c[0]}[{c[1]}]@{c[2]}"


def _source(h: Mapping[str, bytes]) -> Coordinates | None:
    try:
        return h[SOURCE_TOPIC].decode(), int(h[SOURCE_PARTITION]), int(h[SOURCE_OFFSET])
    except (KeyError, ValueError):
        return None


def _source_records(kafka: Mapping[str, str], ranges: list[tuple[str, int, int, int]]) -> Iterator[tuple]:
    """Each record a read_committed reader gets in the committed ranges, with its coordinates."""
    by_partition: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for topic, partition, start, end in ranges:
        by_partition.setdefault((topic, partition), []).append((start, end))
    starts = [(t, p, min(s for s, _ in spans)) for (t, p), spans in by_partition.items()]
    ends = {key: max(e for _, e in spans) for key, spans in by_partition.items()}
    for m in read_to_end(kafka, starts, ends):
        if any(s <= m.offset() < e for s, e in by_partition[(m.topic(), m.partition())]):
            yield m, (m.topic(), m.partition(), m.offset())
