"""The demo's orders declaration, read from the project's own pipelines.yml, for tests of its checks.

The orders checks are a declaration like any pipeline's: these tests hold the declared rules to the
orders behaviour the project had when the rules were hand-written.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from eosflow import pipelines
from eosflow.schema.declaration import RecordSchema
from eosflow.schema.record import RecordCheck

PIPELINES_YML = Path(__file__).resolve().parents[1] / "pipelines.yml"
SCHEMA: RecordSchema = pipelines.load_all(None, PIPELINES_YML)["orders"].schema  # type: ignore[arg-type]
COLUMNS = SCHEMA.columns
NAMES = [c.name for c in COLUMNS]


@cache
def record_check(max_value_bytes: int) -> RecordCheck:
    return RecordCheck(SCHEMA, max_value_bytes)


def check_value(value: bytes | None, max_value_bytes: int) -> tuple[str | None, list | None]:
    """One orders record through the declared check: (error, None) or (None, typed columns)."""
    return record_check(max_value_bytes)(value)


def declaration() -> dict:
    """The orders pipeline's settings as pipelines.yml writes them, to declare test pipelines alike."""
    return pipelines.declaration(PIPELINES_YML, "orders")
