"""`deletes:` of a change stream's sink (Postgres and Iceberg share one parse): hard by default, soft on
request, anything else refused naming the two."""

from __future__ import annotations

import pytest

from eosflow.errors import PipelineConfigError
from eosflow.sinks.deletes import Deletes, parse


def test_deletes_are_hard_unless_declared_soft() -> None:
    assert parse({}, "pipeline p") is Deletes.HARD
    assert parse({"deletes": "soft"}, "pipeline p") is Deletes.SOFT
    assert parse({"deletes": "hard"}, "pipeline p") is Deletes.HARD


@pytest.mark.parametrize("value", ["SOFT", "tombstone", True, 1, None])
def test_any_other_deletes_is_refused_naming_the_two(value) -> None:
    with pytest.raises(PipelineConfigError, match=r"pipeline p: deletes .* must be hard .* or soft"):
        parse({"deletes": value}, "pipeline p")
