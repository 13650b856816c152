"""Offset-range backfills, validated before any Spark work: catch-up and replay (DESIGN.md).

- catch-up: read forward from the stored position in ordered chunks; each chunk is a normal run.
- replay: re-read an already committed range [a, b) (say, after a transform fix); the rows of that
  range are replaced in one transaction, the ledger records the replay, positions do not move.

`validate()` is pure: it gets what Kafka and the warehouse say and returns the chunks to run, or
raises BackfillError with one message per problem. The number of chunks is checked in arithmetic
(ceil(span / chunk_size) per range) before any list of them exists, so a request of a million chunks
is refused in the memory of one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from numbers import Integral

from eosflow.ledger.planner import PartitionOffsets
from eosflow.ledger.ranges import OffsetRange


class BackfillMode(StrEnum):
    """What a backfill does (`--mode`, the backfill DAG's form): its text is what users type."""

    CATCH_UP = "catch-up"  # reads what no run committed yet, up to the last stable offset
    REPLAY = "replay"  # re-reads committed ranges, replacing their rows in one commit


MODES: tuple[str, ...] = tuple(m.value for m in BackfillMode)  # as text: argparse's choices, a form's enum
DEFAULT_CHUNK_SIZE = 100_000


class BackfillError(ValueError):
    """The backfill request cannot run; the message says what is wrong and what would work."""


@dataclass(frozen=True)
class BackfillRequest:
    pipeline: str
    mode: str
    partitions: tuple[int, ...] | None  # None: every partition
    from_offset: int | None = None
    to_offset: int | None = (
        None  # exclusive; None: up to the last stable offset (catch-up) / position (replay)
    )
    chunk_size: int = DEFAULT_CHUNK_SIZE
    topic: str | None = None  # None: the pipeline's only topic

    @classmethod
    def parse_partitions(cls, text: str | None) -> tuple[int, ...] | None:
        if text is None or str(text).strip().lower() in ("", "all"):
            return None
        try:
            parts = tuple(sorted({int(p) for p in str(text).split(",") if p.strip()}))
        except ValueError:
            raise BackfillError(
                f"partitions must be 'all' or a comma-separated list like 0,2; got {text!r}"
            ) from None
        if not parts or any(p < 0 for p in parts):
            raise BackfillError(f"partitions must be 'all' or non-negative numbers like 0,2; got {text!r}")
        return parts

    @classmethod
    def parse_chunk_size(cls, value: object) -> int:
        """A form's chunk_size: missing (None, empty) is the default; anything else must be a whole
        number (1.5 and true are not), which `validate` then holds to >= 1 (0 is refused, never
        replaced by the default)."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return DEFAULT_CHUNK_SIZE
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        elif isinstance(value, Integral) and not isinstance(value, bool):
            return int(value)
        raise BackfillError(f"chunk_size must be a whole number of offsets >= 1; got {value!r}")


def validate(
    request: BackfillRequest,
    topic: str,
    kafka: Mapping[int, PartitionOffsets],
    positions: Mapping[int, int | None],
    committed: Mapping[int, tuple[int, int]],
    max_chunks: int | None = None,
) -> list[OffsetRange]:
    """The chunks to run, ordered by partition then offset; or BackfillError naming every problem.

    committed[p] = (first committed start, stored position) for partitions with committed data.
    max_chunks: how many chunks the runner can take (Airflow maps at most core.max_map_length tasks).
    """
    ranges = plan_ranges(request, topic, kafka, positions, committed)
    check_chunk_count(request, ranges, max_chunks)
    return chunks_of(ranges, request.chunk_size)


def plan_ranges(
    request: BackfillRequest,
    topic: str,
    kafka: Mapping[int, PartitionOffsets],
    positions: Mapping[int, int | None],
    committed: Mapping[int, tuple[int, int]],
) -> list[OffsetRange]:
    """The request's validated range per partition, not yet cut into chunks; BackfillError naming
    every problem (a chunk_size below 1 included)."""
    if request.mode not in MODES:
        raise BackfillError(f"mode must be one of {', '.join(MODES)}; got {request.mode!r}")
    size = request.chunk_size
    if type(size) is not int or size < 1:  # bool and float are no chunk sizes either
        raise BackfillError(f"chunk_size must be a whole number of offsets >= 1; got {size!r}")
    if (
        request.from_offset is not None
        and request.to_offset is not None
        and request.to_offset < request.from_offset
    ):
        raise BackfillError(
            f"the range ends before it starts: to {request.to_offset} < from {request.from_offset}"
        )
    chosen = request.partitions if request.partitions is not None else tuple(sorted(kafka))
    unknown = [p for p in chosen if p not in kafka]
    if unknown:
        raise BackfillError(
            f"topic {topic} has no partition {', '.join(map(str, unknown))}; it has 0 to {max(kafka)}"
        )

    problems: list[str] = []
    ranges: list[OffsetRange] = []
    for p in chosen:
        offs = kafka[p]
        if request.mode == BackfillMode.CATCH_UP:
            r = _catch_up(p, topic, request, offs, positions.get(p), problems)
        else:
            r = _replay(p, topic, request, offs, committed.get(p), problems)
        if r is not None and not r.empty:
            ranges.append(r)
    if problems:
        raise BackfillError(
            f"backfill of {request.pipeline} refused, nothing was run: " + "; ".join(problems)
        )
    if not ranges:
        raise BackfillError(
            f"backfill of {request.pipeline}: the requested range is empty in every partition"
        )
    return ranges


def chunk_count(ranges: list[OffsetRange], size: int) -> int:
    """How many chunks of `size` offsets `ranges` make, counted without making them."""
    return sum(-(-r.span // size) for r in ranges)


def check_chunk_count(request: BackfillRequest, ranges: list[OffsetRange], max_chunks: int | None) -> None:
    """BackfillError if the ranges make more chunks than the runner takes: arithmetic, before any
    chunk exists (chunk_size 1 over a hundred million offsets must not build a hundred million)."""
    if max_chunks is None:
        return
    count = chunk_count(ranges, request.chunk_size)
    if count <= max_chunks:
        return
    # Each partition's range gets an equal share of the chunks; the widest decides the size.
    share = max_chunks // len(ranges)
    fits = (
        f"a chunk_size of at least {max(-(-r.span // share) for r in ranges):,}, or fewer partitions"
        if share
        else "fewer partitions per backfill"
    )
    raise BackfillError(
        f"backfill of {request.pipeline} refused, nothing was run: {count:,} chunks of "
        f"{request.chunk_size:,} offsets, but the orchestrator runs at most {max_chunks} "
        f"(Airflow's core.max_map_length); use {fits}"
    )


def chunks_of(ranges: list[OffsetRange], size: int) -> list[OffsetRange]:
    return [c for r in ranges for c in chunk(r, size)]


def chunk(r: OffsetRange, size: int) -> list[OffsetRange]:
    return [OffsetRange(r.topic, r.partition, s, min(s + size, r.end)) for s in range(r.start, r.end, size)]


def _bounds(p: int, topic: str, start: int, end: int, offs: PartitionOffsets, problems: list[str]) -> bool:
    ok = True
    if start < offs.log_start:
        problems.append(
            f"{topic}[{p}]: start {start} is below the log start {offs.log_start} "
            "(Kafka has deleted those records)"
        )
        ok = False
    if end > offs.stable_end:
        problems.append(f"{topic}[{p}]: end {end} is beyond the last stable offset {offs.stable_end}")
        ok = False
    return ok


def _catch_up(
    p: int,
    topic: str,
    req: BackfillRequest,
    offs: PartitionOffsets,
    position: int | None,
    problems: list[str],
) -> OffsetRange | None:
    stored = position if position is not None else offs.log_start
    start = req.from_offset if req.from_offset is not None else stored
    end = req.to_offset if req.to_offset is not None else offs.stable_end
    if start != stored:
        where = (
            f"the stored position {position}" if position is not None else f"the log start {offs.log_start}"
        )
        problems.append(
            f"{topic}[{p}]: a catch-up must start at {where}, not {start} "
            "(use mode replay to re-read committed offsets)"
        )
        return None
    if end < start:
        problems.append(f"{topic}[{p}]: end {end} is before the stored position {start}")
        return None
    return OffsetRange(topic, p, start, end) if _bounds(p, topic, start, end, offs, problems) else None


def _replay(
    p: int,
    topic: str,
    req: BackfillRequest,
    offs: PartitionOffsets,
    span: tuple[int, int] | None,
    problems: list[str],
) -> OffsetRange | None:
    if span is None:
        problems.append(f"{topic}[{p}]: nothing was ever committed, so there is nothing to replay")
        return None
    first, position = span
    start = req.from_offset if req.from_offset is not None else first
    end = req.to_offset if req.to_offset is not None else position
    if start < first or end > position:
        problems.append(
            f"{topic}[{p}]: [{start}, {end}) was never committed; committed offsets are [{first}, {position})"
        )
        return None
    return OffsetRange(topic, p, start, end) if _bounds(p, topic, start, end, offs, problems) else None
