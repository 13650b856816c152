"""Rows of statements that always return one (an aggregate, `exists`, an insert's `returning`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import psycopg

Row = TypeVar("Row")


def one_row(cur: psycopg.Cursor[Row]) -> Row:
    """The one row `cur` returns. psycopg types fetchone() as possibly None; these statements always
    return a row, so None here is a bug in the statement, not an empty result."""
    row = cur.fetchone()
    assert row is not None, "the statement returns exactly one row"
    return row
