"""A JSON number no double holds is a rejected row, never infinity or 0 stored in its place: both
the compiled check and the Python check, for JSON, text values and typed keys."""

from __future__ import annotations

from decimal import Decimal

import pytest

from eosflow.schema.declaration import parse_schema
from eosflow.schema.record import RecordCheck, key_check
from eosflow.schema.types import parse_type

OVERFLOW = "out of a double's range: it would be stored as infinity"
UNDERFLOW = "out of a double's range: not 0, but closer to 0 than any double, so it would be stored as 0"


def _check(ctype: str, compiled: bool, exact: bool = False) -> RecordCheck:
    columns = [{"name": "x", "type": ctype}]
    if exact:  # a numeric beyond 15 digits: every JSON number is read as a Decimal
        columns.append({"name": "n", "type": "numeric(20,2)"})
    return RecordCheck(parse_schema({"columns": columns}, "test"), 4096, compiled=compiled)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(
    ("literal", "why"),
    [
        (b"1e400", f"1E+400 is {OVERFLOW}"),
        (b"-1.5e309", f"-1.5E+309 is {OVERFLOW}"),
        (b"1" + b"0" * 400, f"1{'0' * 400} is {OVERFLOW}"),  # an integer past a double, too
        (b"1e-400", f"1E-400 is {UNDERFLOW}"),
        (b"-2.5e-330", f"-2.5E-330 is {UNDERFLOW}"),
    ],
)
def test_a_number_no_double_holds_is_rejected_naming_why(literal, why, compiled, exact):
    check = _check("double", compiled, exact)
    assert check(b'{"x": ' + literal + b"}") == (f"invalid value: x ({why})", None)
    arrays = _check("double[]", compiled, exact)
    assert arrays(b'{"x": [1.5, ' + literal + b"]}") == (f"invalid value: x ({why})", None)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("compiled", [True, False])
def test_zero_and_the_numbers_a_double_holds_are_still_taken(compiled, exact):
    check = _check("double", compiled, exact)
    for literal in (b"0", b"0.0", b"0e5", b"-0.0", b"0E-400"):
        error, typed = check(b'{"x": ' + literal + b"}")
        assert error is None and typed[0] == 0.0, literal
    for literal, value in ((b"1.5", 1.5), (b"1e308", 1e308), (b"5e-324", 5e-324), (b"-2.5e-310", -2.5e-310)):
        error, typed = check(b'{"x": ' + literal + b"}")
        assert (error, typed[0]) == (None, value), literal


def test_the_same_out_of_range_number_in_a_text_value_and_a_typed_key_is_refused_alike():
    spec = {"format": "text", "columns": [{"name": "x", "type": "double", "required": True}]}
    check = RecordCheck(parse_schema(spec, "test"), 4096)
    assert check(b"1e400") == (f"invalid value: x (1E+400 is {OVERFLOW})", None)
    assert check(b"1e-400") == (f"invalid value: x (1E-400 is {UNDERFLOW})", None)
    key = key_check(parse_type("double"))
    assert key(b"1e-400") == (f"invalid key (1E-400 is {UNDERFLOW})", None)
    assert key(b"2.5") == (None, 2.5)


def test_jsonb_and_numeric_keep_such_numbers_exactly_rather_than_as_infinity_or_zero():
    spec = {"columns": [{"name": "doc", "type": "jsonb"}, {"name": "n", "type": "numeric(10,2)"}]}
    for compiled in (True, False):
        check = RecordCheck(parse_schema(spec, "test"), 4096, compiled=compiled)
        assert check(b'{"doc": {"a": 1e-400, "b": 1e400}}') == (
            None,
            [{"a": Decimal("1E-400"), "b": Decimal("1E+400")}, None],
        )
        assert check(b'{"n": 1e-400}') == ("invalid value: n (more than 2 decimal places, got 1E-400)", None)
