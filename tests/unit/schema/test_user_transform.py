"""A pipeline's own Python transform, held to its declaration without Spark."""

from __future__ import annotations

import sys
import types
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from eosflow.schema.declaration import DeclarationError, parse_schema
from eosflow.schema.user_transform import TransformContractError, UserTransform
from eosflow.transform import BatchCheck

CLICK = "0b9a4f3e-5c6d-4e7f-8a9b-0c1d2e3f4a5b"
COLUMNS = [
    {"name": "click_id", "type": "uuid", "required": True},
    {"name": "url", "type": "text", "required": True, "pattern": "^https?://"},
    {"name": "ts", "type": "timestamptz"},
    {"name": "price", "type": "numeric(12,2)", "min": 0},
]


def _schema(transform: str):
    return parse_schema({"columns": COLUMNS, "transform": transform}, "test")


def _kafka_batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array([b"k"] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["t"] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * n),
            "kafka_headers": pa.array(["[]"] * n),
        }
    )


def test_the_worked_example_reads_pipe_separated_lines_and_rejects_what_it_cannot_read():
    run = UserTransform(_schema("eosflow.examples.pipe_clicks:parse"))
    results = run(
        _kafka_batch(
            [
                f"{CLICK}|https://shop.example/p/1|1767225600000|1250".encode(),
                b"only|three|fields",
                f"{CLICK}|ftp://x|1767225600000|1".encode(),  # the declaration's pattern
                f"{CLICK}|https://x|300000000000000|1".encode(),  # year 11476: the function raises
                f"{CLICK}|https://x|1767225600000|-5".encode(),  # min 0
                None,
            ]
        )
    )
    assert results[0] == (
        None,
        [CLICK, "https://shop.example/p/1", datetime(2026, 1, 1, tzinfo=UTC), Decimal("12.5")],
    )
    assert [error for error, _ in results[1:]] == [
        "rejected by transform: expected 4 fields separated by |, got 3",
        "invalid value: url (does not match ^https?://)",
        "transform raised OverflowError: date value out of range",
        "invalid value: price (must be >= 0, got -0.05)",
        "rejected by transform: no value",
    ]


def _module(name: str, function) -> str:
    module = types.ModuleType(name)
    module.f = function
    sys.modules[name] = module
    return f"{name}:f"


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ({"click_id": CLICK.upper(), "url": "https://x"}, "mistyped field: click_id (expected lower-case"),
        ({"click_id": CLICK, "url": 5}, "mistyped field: url (expected str)"),
        ({"click_id": CLICK, "url": "https://\x00"}, "invalid value: url (holds a NUL character"),
        (
            {"click_id": CLICK, "url": "https://x", "ts": datetime(2026, 1, 1)},
            "mistyped field: ts (expected datetime",
        ),
        (
            {"click_id": CLICK, "url": "https://x", "price": 1.5},
            "mistyped field: price (expected Decimal or int)",
        ),
        (
            {"click_id": CLICK, "url": "https://x", "price": Decimal("1.005")},
            "invalid value: price (more than 2",
        ),
        ({"click_id": None, "url": "https://x"}, "missing field: click_id"),
    ],
)
def test_rows_the_declaration_does_not_allow_are_rejected_with_the_reason(row, error):
    full = {"ts": None, "price": None} | row
    reference = _module("eosflow_test_rows", lambda batch: pa.RecordBatch.from_pylist([full]))
    ((found, typed),) = UserTransform(_schema(reference))(_kafka_batch([b"x"]))
    assert typed is None and found.startswith(error), found


def test_a_function_that_breaks_the_contract_stops_the_run_naming_it():
    reference = _module("eosflow_test_short", lambda batch: pa.RecordBatch.from_pylist([]))
    with pytest.raises(TransformContractError, match="returned 0 rows for 2 records"):
        UserTransform(_schema(reference))(_kafka_batch([b"a", b"b"]))
    reference = _module("eosflow_test_columns", lambda batch: pa.RecordBatch.from_pylist([{"url": "x"}]))
    with pytest.raises(TransformContractError, match="returned no column click_id, ts, price"):
        UserTransform(_schema(reference))(_kafka_batch([b"a"]))


def test_a_transform_that_cannot_be_found_is_refused_with_what_to_do():
    with pytest.raises(TransformContractError, match="cannot import 'no_such_pkg.mod'.*PYTHONPATH"):
        UserTransform(_schema("no_such_pkg.mod:f"))
    with pytest.raises(
        TransformContractError, match="no entry point of that name in group 'eosflow.transforms'"
    ):
        UserTransform(_schema("no_such_entry_point"))
    with pytest.raises(DeclarationError, match="must be an import path"):
        _schema("not a reference")


def test_a_batch_check_with_a_transform_keeps_every_record_once():
    check = BatchCheck("p", "b", "v", 4096, _schema("eosflow.examples.pipe_clicks:parse"))
    checked = check(_kafka_batch([f"{CLICK}|https://x|0|100".encode(), b"bad"]))
    assert checked.column("kafka_offset").to_pylist() == [0, 1]
    assert checked.column("error").to_pylist() == [
        None,
        "rejected by transform: expected 4 fields separated by |, got 1",
    ]
    assert checked.column("price").to_pylist() == [Decimal("1.00"), None]
    assert checked.column("raw_value").to_pylist()[1] == b"bad"


SCORED = [
    {"name": "n", "type": "bigint", "required": True},
    {"name": "score", "type": "double"},
    {"name": "scores", "type": "double[]"},
    {"name": "price", "type": "numeric(12,2)"},
]


def _scored(function) -> UserTransform:
    return UserTransform(
        parse_schema({"columns": SCORED, "transform": _module("eosflow_test_scored", function)}, "t")
    )


def _rows(rows: list[dict]):
    full = [{"score": None, "scores": None, "price": None} | r for r in rows]
    return lambda batch: pa.RecordBatch.from_pylist(full)


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ({"n": 1, "score": float("nan")}, "invalid value: score (holds nan, which JSON cannot carry)"),
        ({"n": 1, "score": float("inf")}, "invalid value: score (holds inf, which JSON cannot carry)"),
        ({"n": 1, "score": float("-inf")}, "invalid value: score (holds -inf, which JSON cannot carry)"),
        (
            {"n": 1, "scores": [1.0, float("nan")]},
            "invalid value: scores (holds nan, which JSON cannot carry)",
        ),
    ],
)
def test_a_transforms_nan_or_infinity_is_a_rejected_row_naming_the_column(row, error):
    # The Kafka sink wrote null for them, Postgres kept NaN: neither is what the JSON record could say.
    ((found, typed),) = _scored(_rows([row]))(_kafka_batch([b"x"]))
    assert (found, typed) == (error, None)


def test_a_transforms_finite_doubles_are_kept():
    ((found, typed),) = _scored(_rows([{"n": 1, "score": 1.5e308, "scores": [0.0, -2.5]}]))(
        _kafka_batch([b"x"])
    )
    assert (found, typed) == (None, [1, 1.5e308, [0.0, -2.5], None])


def _raising(exc: BaseException):
    """A transform that raises `exc` for the record b"boom" and returns a row for any other."""

    def f(batch: pa.RecordBatch) -> pa.RecordBatch:
        values = batch.column("value").to_pylist()
        if b"boom" in values:
            raise exc
        return pa.RecordBatch.from_pylist(
            [{"n": len(v), "score": None, "scores": None, "price": None} for v in values]
        )

    return f


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (SystemExit(3), "transform raised SystemExit: 3"),
        (KeyboardInterrupt(), "transform raised KeyboardInterrupt"),
        (GeneratorExit("closed"), "transform raised GeneratorExit: closed"),
        (ValueError(""), "transform raised ValueError"),
    ],
)
def test_a_transform_raising_systemexit_or_keyboardinterrupt_rejects_only_that_record(exc, error):
    results = _scored(_raising(exc))(_kafka_batch([b"a", b"boom", b"ccc"]))
    assert results == [(None, [1, None, None, None]), (error, None), (None, [3, None, None, None])]


def test_a_batch_check_with_a_transform_raising_systemexit_still_finishes_the_batch():
    schema = parse_schema(
        {"columns": SCORED, "transform": _module("eosflow_test_exit", _raising(SystemExit(1)))}, "t"
    )
    checked = BatchCheck("p", "b", "v", 4096, schema)(_kafka_batch([b"boom", b"ok"]))
    assert checked.column("error").to_pylist() == ["transform raised SystemExit: 1", None]


def test_a_real_interrupt_of_the_process_while_the_transform_runs_is_not_a_rejected_row():
    # Ctrl-C (SIGINT) reaching the process during the call interrupts the run; the record is not at fault.
    import os
    import signal
    import time

    def interrupted(batch: pa.RecordBatch) -> pa.RecordBatch:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises KeyboardInterrupt here
        raise AssertionError("no interrupt arrived")

    # Python's own handler, as in a run's main thread (a SparkContext in this process installs another).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            _scored(interrupted)(_kafka_batch([b"a", b"b"]))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back as it was
    finally:
        signal.signal(signal.SIGINT, before)
