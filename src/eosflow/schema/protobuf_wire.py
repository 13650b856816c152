"""Confluent's Protobuf framing: magic byte 0, a 4-byte big-endian schema id, the message-index array.

The array names the message the value holds in its writer schema's file: the top-level message
`indexes[0]`, then its nested message `indexes[1]`, ... It is written as a zigzag varint count, then
that many zigzag varints; the common case [0] as the single byte 0 (a count of 0 reads as [0]), as
confluent-kafka's SchemaId writes and reads it (confluent_kafka/schema_registry/common/serde.py).
Reading never raises on bad input: a value it cannot read is a `WireError`, whose text is the
rejected row's reason.
"""

from __future__ import annotations

MAGIC = 0
HEADER_BYTES = 5
MAX_VARINT_BYTES = 10  # a 64-bit varint; more is not a varint a serializer writes
MAX_INDEXES = 100  # a path into nested messages: protobuf itself parses no deeper than 100
NO_HEADER = "not Protobuf: no Confluent wire-format header (magic byte 0 and a 4-byte schema id)"


class WireError(ValueError):
    """A value's framing cannot be read; str() is the rejected row's reason."""


def zigzag(n: int) -> int:
    """A signed int as the unsigned int its zigzag varint carries (0, -1, 1, -2 -> 0, 1, 2, 3)."""
    return (n << 1) ^ (n >> 63)


def unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def varint(n: int) -> bytes:
    """The zigzag varint of `n` (a 64-bit signed int)."""
    n = zigzag(n) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The zigzag varint at data[pos:] and the position after it; WireError if it is cut or too long."""
    value = shift = 0
    for i in range(pos, min(len(data), pos + MAX_VARINT_BYTES)):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return unzigzag(value), i + 1
        shift += 7
    if len(data) - pos < MAX_VARINT_BYTES:
        raise WireError("truncated varint")
    raise WireError(f"a varint longer than {MAX_VARINT_BYTES} bytes")


def header(schema_id: int, indexes: tuple[int, ...] | list[int] = (0,)) -> bytes:
    """The bytes before a serialized message: magic byte, schema id, message-index array."""
    if not indexes or any(i < 0 for i in indexes):
        raise ValueError(f"message indexes {list(indexes)} must be a non-empty path of indexes >= 0")
    start = bytes([MAGIC]) + schema_id.to_bytes(4, "big")
    if tuple(indexes) == (0,):
        return start + b"\x00"
    return start + varint(len(indexes)) + b"".join(varint(i) for i in indexes)


def split(value: bytes) -> tuple[int, tuple[int, ...], memoryview]:
    """(schema id, message indexes, the serialized message) of a value; WireError if it has none."""
    if len(value) < HEADER_BYTES or value[0] != MAGIC:
        raise WireError(NO_HEADER)
    schema_id = int.from_bytes(value[1:HEADER_BYTES], "big")
    view = memoryview(value)
    if len(value) > HEADER_BYTES and value[HEADER_BYTES] == 0:  # [0], by far the most common
        return schema_id, (0,), view[HEADER_BYTES + 1 :]
    try:
        count, pos = read_varint(view, HEADER_BYTES)
        if count == 0:
            return schema_id, (0,), view[pos:]
        if not 0 < count <= MAX_INDEXES:
            raise WireError(f"a count of {count}, not 1 to {MAX_INDEXES}")
        indexes = []
        for _ in range(count):
            index, pos = read_varint(view, pos)
            if index < 0:
                raise WireError(f"a negative index {index}")
            indexes.append(index)
    except WireError as exc:
        raise WireError(
            f"not Protobuf: bad message-index array after schema id {schema_id} ({exc})"
        ) from None
    return schema_id, tuple(indexes), view[pos:]
