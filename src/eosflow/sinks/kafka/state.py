"""A change stream's state in a compacted output topic (docs/DESIGN.md, "State in Kafka").

The output topic is the state: a record per change, keyed by the primary key (a JSON object of the key
columns in declared order, as Debezium keys its topics), the row image as the value, a delete as a
tombstone. Compaction keeps each key's last record, so the topic itself must hold each key's changes in
the source's order: a change goes to the output partition of its source partition's number, and each
range's transaction first restores that partition's last record per key (`PartitionState.restore`) and
then produces only the changes newer than what a key holds (`PartitionState.apply`). An older or equal
change is superseded: it goes to the dead-letter topic, naming the position it lost to.

Pure: this module decides what to produce; restore.py reads the partition, produce.py produces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import msgspec

from eosflow.schema.changes import TOMBSTONE, declared
from eosflow.schema.declaration import RecordSchema
from eosflow.sinks.kafka.json_out import json_value

POSITION_HEADER = "eosflow-change-position"
OP_HEADER = "eosflow-change-op"
# (source position, source partition, source offset): DESIGN's order; a change without a position (a keyed
# topic, or Debezium without source.lsn) counts as lowest.
Position = tuple[int, int, int]
NO_POSITION = -1
LOWEST: Position = (NO_POSITION, NO_POSITION, NO_POSITION)

_JSON = msgspec.json.Encoder(decimal_format="number")
_RAW_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])


def position_of(lsn: int | None, partition: int, offset: int) -> Position:
    return (NO_POSITION if lsn is None else lsn, partition, offset)


def is_newer(position: Position, held: Position) -> bool:
    """Whether a change at `position` comes after what a key holds. Two source positions alone decide
    (each change has its own LSN, so an equal one is the same change re-delivered, at a higher offset);
    without one the Kafka coordinates do, a missing position counting as lowest."""
    if position[0] != NO_POSITION and held[0] != NO_POSITION:
        return position[0] > held[0]
    return position > held


def position_text(position: Position) -> str:
    """The header's text: `lsn/partition/offset`, `-` for a change without a source position."""
    lsn, partition, offset = position
    return f"{'-' if lsn == NO_POSITION else lsn}/{partition}/{offset}"


def parse_position(raw: bytes | str | None) -> Position | None:
    """The position a record's header names; None when it names none (not written by eosflow)."""
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    parts = text.split("/")
    try:
        lsn, partition, offset = parts
        return (NO_POSITION if lsn == "-" else int(lsn), int(partition), int(offset))
    except ValueError:
        return None


Headers = Sequence[tuple[str, bytes | None]] | Callable[[], Sequence[tuple[str, bytes | None]] | None] | None


def _position_header(headers: Headers) -> Position | None:
    found = headers() if callable(headers) else headers
    if not found:
        return None
    name, raw = found[-1]  # eosflow writes the position last: look there first
    if name != POSITION_HEADER:
        raw = next((v for k, v in found if k == POSITION_HEADER), None)
    return parse_position(raw)


@dataclass
class Held:
    """What one key holds in its output partition: its last record, and its last row image."""

    position: Position
    value: bytes | None  # the last record's value; None: a tombstone (deleted)
    # The last non-null value (what a moved key's unchanged TOAST columns come from); none once the key is
    # deleted twice with no value between (a rejected create: the row the second delete took is unknown).
    image: bytes | None
    typed: Sequence[object] | None = None  # that image's typed columns, when this run produced it


@dataclass(frozen=True)
class Produce:
    key: bytes
    value: bytes | None  # None: a tombstone
    headers: tuple[tuple[str, bytes], ...]
    position: Position
    typed: Sequence[object] | None = None  # the image as produced (filled), when at hand


@dataclass(frozen=True)
class Reject:
    reason: str


NOTHING = None  # Debezium's own tombstone: written (it changes nothing), nothing produced
Action = Produce | Reject | None


TRUNCATE_REJECTED = (
    "a truncate cannot be applied to one partition of a compacted topic (the other partitions hold keys "
    "too): set Debezium's truncate.handling.mode=skip, or replicate the table into a new output_topic "
    "after the truncate"
)


class PartitionState:
    """One output partition's last record per key, and the change-stream rules that keep it ordered.

    schema: the pipeline's (declared columns, then the change's own: eosflow.schema.changes).
    encode: a row image's typed columns -> the output value (JSON by default; Avro, Protobuf).
    """

    def __init__(
        self,
        schema: RecordSchema,
        encode: Callable[[Sequence[object]], bytes] | None = None,
        output_format: str = "json",
        decode: Callable[[bytes], Sequence[object] | None] | None = None,
    ) -> None:
        """decode: an output value back to the typed image `encode` took (None: not one it can read), for a
        format other than JSON (avro_image); JSON values are filled column by column as their JSON text."""
        image = declared(schema)
        self.names = tuple(c.name for c in image)
        self.width = len(image)
        self.key_names = tuple(c.name for c in image if c.name in schema.primary_key)
        # Declared order, as Debezium keys its topics (the primary_key list may name them otherwise).
        self.key_index = tuple(self.names.index(n) for n in self.key_names)
        self.encode = encode or self._json
        self.output_format = output_format
        self.decode = decode
        self.keys: dict[bytes, Held] = {}  # produced by this run, or restored and asked for since
        # Restored from the output partition: key -> (its headers, last value, last non-null value).
        self.restored: dict[bytes, tuple[Headers, bytes | None, bytes | None]] = {}

    def _json(self, typed: Sequence[object]) -> bytes:
        return json_value(self.names, typed)

    def key_of(self, typed: Sequence[object]) -> bytes:
        """The output key: a JSON object of the primary key's columns, in declared order."""
        return json_value(self.key_names, [typed[i] for i in self.key_index])

    def old_key(self, old: dict) -> bytes:
        return _JSON.encode({n: old.get(n) for n in self.key_names})

    # --- the restore

    def restore(self, records: Iterable[tuple[bytes | None, bytes | None, Headers]]) -> int:
        """Each key's last record from (key, value, headers) in offset order; returns the records read.
        headers: the record's, or a function giving them (a consumed message's `headers`): read only
        when a change of the key asks for its position (most keys never are; reading every record's
        headers took a third of a restore)."""
        n = 0
        restored = self.restored
        for key, value, headers in records:
            n += 1
            if key is None:
                continue
            if value is None:  # a delete keeps the row it deleted; a second delete, none (see `produced`)
                before = restored.get(key)
                kept = before[2] if before is not None and before[1] is not None else None
                restored[key] = (headers, None, kept)
            else:
                restored[key] = (headers, value, value)
        return n

    def held(self, key: bytes) -> Held | None:
        """What `key` holds: what this run produced, else its restored record."""
        held = self.keys.get(key)
        if held is None and (found := self.restored.get(key)) is not None:
            headers, value, image = found
            held = self.keys[key] = Held(_position_header(headers) or LOWEST, value, image)
        return held

    # --- a change

    def apply(self, typed: list, partition: int, offset: int) -> Action:
        """What a checked change becomes: a record to produce, a rejection, or nothing. The caller records
        a produced record with `produced` once it went to the output topic."""
        image = typed[: self.width]
        op, lsn, _ts, unchanged, old_key = typed[self.width : self.width + 5]
        if op == TOMBSTONE:
            return NOTHING
        if op == "t":
            return Reject(TRUNCATE_REJECTED)
        key = self.key_of(image)
        position = position_of(lsn, partition, offset)
        held = self.held(key)
        if held is not None and not is_newer(position, held.position):
            return Reject(
                f"superseded: change at position {position_text(position)} is not newer than the "
                f"position {position_text(held.position)} key {key.decode('utf-8', 'replace')} holds "
                "in the output topic"
            )
        headers = (
            (OP_HEADER, op.encode()),
            (POSITION_HEADER, position_text(position).encode()),
        )
        if op == "d":
            return Produce(key, None, headers, position)
        if unchanged:
            return self._fill(image, unchanged, held, old_key, Produce(key, None, headers, position))
        return Produce(key, self.encode(image), headers, position, image)

    def produced(self, record: Produce) -> None:
        """Remember what went to the output topic: the key's last record from now on."""
        held = self.held(record.key)
        if record.value is None:
            # A delete keeps the image of the row it deleted: a move's create takes its values. A delete of
            # a key already deleted keeps none: the row it deleted (a create this partition rejected, or
            # never held) is not the one before the first delete, and the source no longer holds that.
            if held is not None and held.value is not None:
                image, kept = held.image, held.typed
            else:
                image, kept = None, None
        else:
            image, kept = record.value, record.typed
        self.keys[record.key] = Held(record.position, record.value, image, kept)

    def _fill(
        self,
        image: list,
        unchanged: Sequence[str],
        held: Held | None,
        old_key: dict | None,
        record: Produce,
    ) -> Produce | Reject:
        """The image with the columns Debezium left out (TOAST, unchanged) taken from the row they belong
        to: the key's last image, or a moved key's old one (change_old_key), in this partition."""
        if old_key is not None:
            source, whose = self.held(self.old_key(old_key)), "its old key"
            if source is None or source.image is None:
                return Reject(
                    f"unchanged TOAST column(s) {list(unchanged)} of a key moved from another partition "
                    "(or whose old row compaction removed): their values are not in this output partition. "
                    "Set REPLICA IDENTITY FULL on the source table so Debezium sends them"
                )
        else:
            source, whose = held, "the key"
            if source is None or source.value is None:
                return Reject(
                    f"unchanged TOAST column(s) {list(unchanged)}: the key holds no row in the output "
                    "topic to take their values from. Set REPLICA IDENTITY FULL on the source table so "
                    "Debezium sends them"
                )
        assert source.image is not None  # a key whose last record is a value holds it as its image
        index = {n: i for i, n in enumerate(self.names)}
        typed = source.typed  # produced by this run: typed at hand, for every output format
        if typed is None and self.output_format != "json":
            typed = self.decode(source.image) if self.decode is not None else None
            if typed is None:
                return Reject(
                    f"unchanged TOAST column(s) {list(unchanged)}: {whose}'s row is in the output topic "
                    f"as {self.output_format} eosflow cannot read back (protobuf, or Avro of an earlier "
                    "schema); use output_format json or avro, or set REPLICA IDENTITY FULL on the source "
                    "table"
                )
        if typed is not None:
            filled = list(image)
            for name in unchanged:
                filled[index[name]] = typed[index[name]]
            return dataclasses.replace(record, value=self.encode(filled), typed=filled)
        # A JSON record restored from the topic: its columns' JSON taken as they are, byte for byte.
        try:
            held_columns = _RAW_OBJECT.decode(source.image)
        except msgspec.DecodeError:
            held_columns = None
        if held_columns is None or any(name not in held_columns for name in unchanged):
            return Reject(
                f"unchanged TOAST column(s) {list(unchanged)}: {whose}'s record in the output topic does "
                "not hold them"
            )
        out = _RAW_OBJECT.decode(self.encode(image))
        for name in unchanged:
            out[name] = held_columns[name]
        return dataclasses.replace(record, value=_JSON.encode(out))


def avro_image(output, value: bytes) -> list | None:
    """An Avro output value (eosflow.schema.avro_out.AvroOutput's) back to the typed image it was encoded
    from; None for a value of another schema id (written before the declaration changed)."""
    import io
    import json
    from decimal import Decimal

    import fastavro

    if len(value) < 5 or value[0] != 0 or int.from_bytes(value[1:5], "big") != output.schema_id:
        return None
    record = fastavro.schemaless_reader(io.BytesIO(value[5:]), output._parsed, None)
    assert isinstance(record, dict)  # a record schema reads a dict
    # jsonb travels as its JSON text; the encoder writes the value it holds as JSON text again.
    return [
        json.loads(v, parse_float=Decimal) if n in output.jsonb and v is not None else v
        for n, v in ((n, record.get(n)) for n in output.names)
    ]


def image_schema(schema: RecordSchema) -> RecordSchema:
    """The schema of the output's values: the declared columns, without the change's own."""
    return dataclasses.replace(schema, columns=declared(schema), changes=None, primary_key=())
