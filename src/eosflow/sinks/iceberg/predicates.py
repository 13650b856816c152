"""PyIceberg's predicates on a column by name, typed once here: mypy takes their pydantic fields
(term, value) for the constructor and misses PyIceberg's own __init__(term, literal). Imported when
called, as the sink's modules import PyIceberg."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression


def equal_to(column: str, value: object) -> BooleanExpression:
    from pyiceberg.expressions import EqualTo

    return EqualTo(column, value)  # type: ignore[call-arg, arg-type]  # PyIceberg's __init__, not pydantic's


def less_than(column: str, value: object) -> BooleanExpression:
    from pyiceberg.expressions import LessThan

    return LessThan(column, value)  # type: ignore[call-arg, arg-type]  # PyIceberg's __init__, not pydantic's


def less_than_or_equal(column: str, value: object) -> BooleanExpression:
    from pyiceberg.expressions import LessThanOrEqual

    return LessThanOrEqual(column, value)  # type: ignore[call-arg, arg-type]  # as equal_to


def greater_than_or_equal(column: str, value: object) -> BooleanExpression:
    from pyiceberg.expressions import GreaterThanOrEqual

    return GreaterThanOrEqual(column, value)  # type: ignore[call-arg, arg-type]  # as equal_to


def is_null(column: str) -> BooleanExpression:
    from pyiceberg.expressions import IsNull

    return IsNull(column)  # type: ignore[call-arg, arg-type]  # PyIceberg's __init__(term), not pydantic's
