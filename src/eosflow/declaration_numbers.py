"""The whole numbers a declaration takes, checked the same way for pipelines, publishers and sinks (as
eosflow.names checks their names): a module of its own, below the declarations and the sinks, so a sink's
`declare` reads its keys without importing eosflow.pipelines (which loads the sinks).
"""

from __future__ import annotations

from collections.abc import Mapping

from eosflow.errors import PipelineConfigError


def whole_number(
    spec: Mapping, key: str, default: int, where: str, *, high: int, why: str, low: int = 1
) -> int:
    """spec[key] (or `default`), a whole number from `low` to `high`; `why` says what bounds it. A float
    (YAML reads 1.0e+20 or 5.0 as one) or a boolean is refused, not rounded or read as 1."""
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        kind = (
            " (true/false is not a number)"
            if isinstance(value, bool)
            else " (a float: write the digits of a whole number)"
            if isinstance(value, float)
            else ""
        )
        raise PipelineConfigError(
            f"{where}: {key} must be a whole number >= {low:,} and <= {high:,} ({why}), not {value!r}{kind}"
        )
    return value
