"""What a change stream's delete does to its state table (`deletes:` of the Postgres and Iceberg sinks)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from eosflow.errors import PipelineConfigError


class Deletes(StrEnum):
    HARD = "hard"  # a deleted key's row is removed
    SOFT = "soft"  # it stays, with deleted_at


def parse(spec: Mapping[str, object], where: str) -> Deletes:
    """`deletes:` of a sink's declaration (default hard), or the refusal naming the two it may be."""
    raw = spec.get("deletes", Deletes.HARD.value)
    try:
        return Deletes(raw if isinstance(raw, str) else repr(raw))
    except ValueError:
        raise PipelineConfigError(
            f"{where}: deletes {raw!r} must be hard (a deleted key's row is removed) or soft (it stays, "
            "with deleted_at)"
        ) from None
