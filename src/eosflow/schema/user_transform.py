"""A pipeline's own Python transform, for what a declaration cannot say.

`transform: mypackage.module:function` (or the name of an `eosflow.transforms` entry point) names a
pure function from one Arrow batch of Kafka records to one Arrow batch (or table) of rows: the
declared columns, plus an optional `error` column (a reason: the record is rejected; null: valid),
one row per input row, in input order. The input batch has the columns `key`, `value` (binary),
`topic`, `partition`, `offset`, `timestamp` and `kafka_headers` (the headers as JSON text).

eosflow holds the output to the declaration: each value must be of its column's type as Python
sees it (str, int, float, Decimal, bool, an aware datetime, date, list; any JSON value for jsonb),
within the column's rules, and storable by Postgres; a double (alone or in an array) is finite, as
JSON has no NaN or infinity (the Kafka sink would write null). A row that is not becomes a rejected
row with the reason; a batch on which the function raises is retried record by record, and a record
on which it raises is rejected with the exception: any exception, SystemExit, KeyboardInterrupt and
GeneratorExit included, for the function cannot end the task. Only an exception raised while the
process itself is being interrupted (a SIGINT or SIGTERM reached it during the call, and its Python
handler raised) is not the record's: it goes on up. A function that breaks the contract itself (another
number of rows, a declared column missing) stops the run with a message naming it: that is a bug
in the code, and no record can be trusted to it.
"""

from __future__ import annotations

import importlib
import math
import signal
import threading
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from importlib.metadata import entry_points

import pyarrow as pa

from eosflow.schema.declaration import Column, RecordSchema
from eosflow.schema.record import _rules
from eosflow.schema.types import BAD, ColumnType, array_of, for_each

ENTRY_POINT_GROUP = "eosflow.transforms"


class TransformContractError(RuntimeError):
    """The user's transform cannot be used: not found, or its output is not what the contract says."""


def load(reference: str) -> Callable[[pa.RecordBatch], object]:
    """The function a pipeline's `transform` names; TransformContractError if there is none."""
    if ":" in reference:
        module_name, _, name = reference.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise TransformContractError(
                f"transform {reference!r}: cannot import {module_name!r} ({exc}); install the package in "
                "eosflow's environment (the Spark workers import it too) or put it on PYTHONPATH"
            ) from None
        function = getattr(module, name, None)
    else:
        found = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == reference]
        if not found:
            raise TransformContractError(
                f"transform {reference!r}: no entry point of that name in group {ENTRY_POINT_GROUP!r} "
                "(and no ':' for an import path such as mypackage.module:function)"
            )
        function = found[0].load()
    if not callable(function):
        raise TransformContractError(f"transform {reference!r} is not a function")
    return function


class UserTransform:
    """Runs the user's function over a batch and checks its rows; built once per Python task."""

    def __init__(self, schema: RecordSchema) -> None:
        if schema.transform is None:
            raise ValueError("the schema names no transform")
        self.reference = schema.transform
        self.function = load(schema.transform)
        self.columns = schema.columns
        self._checks = tuple(_value_check(c) for c in schema.columns)
        self._interrupted = False  # a signal reached the process during the last call of the function

    def __call__(self, batch: pa.RecordBatch) -> list[tuple[str | None, list | None]]:
        """Per input row: (None, the typed columns) or (the reason it is rejected, None)."""
        try:
            rows = self._rows(batch)
        except TransformContractError:
            raise
        except BaseException:  # a poison record somewhere in the batch: find it, record by record
            if self._interrupted:
                raise
            return [result for i in range(batch.num_rows) for result in self._isolated(batch.slice(i, 1))]
        return [self._check(row) for row in rows]

    def _isolated(self, one: pa.RecordBatch) -> list[tuple[str | None, list | None]]:
        try:
            (row,) = self._rows(one)
        except TransformContractError:
            raise
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the record's, not the task's
            if self._interrupted:
                raise
            return [(_raised(exc), None)]
        return [self._check(row)]

    def _rows(self, batch: pa.RecordBatch) -> list[dict]:
        """`_call`, noting whether a signal interrupted the process meanwhile (`_interrupted`)."""
        watch = _SignalWatch()
        try:
            with watch:
                return self._call(batch)
        finally:
            self._interrupted = watch.seen

    def _call(self, batch: pa.RecordBatch) -> list[dict]:
        out = self.function(batch)
        if isinstance(out, pa.Table):
            out = out.combine_chunks().to_batches()[0] if out.num_rows else pa.RecordBatch.from_pylist([])
        if not isinstance(out, pa.RecordBatch):
            raise TransformContractError(
                f"transform {self.reference!r} returned {type(out).__name__}, "
                "not a pyarrow RecordBatch or Table"
            )
        if out.num_rows != batch.num_rows:
            raise TransformContractError(
                f"transform {self.reference!r} returned {out.num_rows} rows for {batch.num_rows} records: "
                "it must return one row per record, in order (reject a record with the error column)"
            )
        missing = [c.name for c in self.columns if c.name not in out.schema.names]
        if missing and out.num_rows:
            raise TransformContractError(
                f"transform {self.reference!r} returned no column {', '.join(missing)}: every declared "
                "column must be in its output (null where a row has no value)"
            )
        return out.to_pylist()

    def _check(self, row: dict) -> tuple[str | None, list | None]:
        error = row.get("error")
        if error is not None:
            return f"rejected by transform: {error}"[:1000], None
        typed: list[object] = []
        for column, check in zip(self.columns, self._checks, strict=True):
            value = row.get(column.name)
            if value is None:
                if column.required:
                    return f"missing field: {column.name}", None
                typed.append(None)
                continue
            ok, reason = check(value)
            if not ok:
                return f"{reason}", None
            typed.append(value if ok is True else ok)
        return None, typed


def _raised(exc: BaseException) -> str:
    said = str(exc)
    return f"transform raised {type(exc).__name__}{': ' + said if said else ''}"[:1000]


class _SignalWatch:
    """Notes whether a SIGINT or SIGTERM reached the process while the user's function ran.

    A KeyboardInterrupt (or whatever a SIGTERM handler raises) from a real signal is the process being
    stopped, and must go on up; the same exception raised by the function's own code is the record's.
    Only the main thread receives signals, so elsewhere nothing is watched and every exception is the
    function's. A handler that is not Python's (SIG_DFL, SIG_IGN) raises nothing, so is left alone."""

    _WATCHED = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.seen = False
        self._restore: list[tuple[int, Callable]] = []

    def __enter__(self) -> _SignalWatch:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in self._WATCHED:
            previous = signal.getsignal(signum)
            if callable(previous):
                signal.signal(signum, self._noting(previous))
                self._restore.append((signum, previous))
        return self

    def _noting(self, previous: Callable) -> Callable:
        def handler(signum: int, frame: object) -> object:
            self.seen = True
            return previous(signum, frame)

        return handler

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._restore:
            signal.signal(signum, previous)


def _not_finite(v: float) -> str | None:
    # JSON has neither NaN nor infinity: the Kafka sink would write null, Postgres would keep them.
    return f"holds {v}, which JSON cannot carry" if type(v) is float and not math.isfinite(v) else None


def _value_check(column: Column) -> Callable[[object], tuple[object, str | None]]:
    """A typed Python value -> (True or the value to keep, None), or (False, the reason)."""
    accept = _python_accept(column.type)
    rules = _rules(column)
    if (column.type.element or column.type).declared == "double":
        rules = (for_each(_not_finite) if column.type.is_array else _not_finite, *rules)

    def check(value: object) -> tuple[object, str | None]:
        kept = accept(value)
        if kept is BAD:
            return False, f"mistyped field: {column.name} (expected {_python_expected(column.type)})"
        for rule in rules:
            if (why := rule(kept)) is not None:
                return False, f"invalid value: {column.name} ({why})"
        return kept, None

    return check


def _python_accept(ctype: ColumnType) -> Callable[[object], object]:
    if ctype.element is not None:
        return array_of(_python_accept(ctype.element))
    declared = ctype.declared
    if declared == "timestamptz":
        return lambda v: v if type(v) is datetime and v.utcoffset() is not None else BAD
    if declared == "date":
        return lambda v: v if type(v) is date else BAD
    if declared.startswith("numeric"):
        return lambda v: ctype.accept(v) if type(v) in (Decimal, int) else BAD
    if declared == "jsonb":
        return lambda v: v
    return ctype.accept  # text, uuid, bigint, integer, double, boolean: the same Python types as JSON


def _python_expected(ctype: ColumnType) -> str:
    spelled = {
        "timestamptz": "datetime with a time zone",
        "date": "date",
        "text": "str",
        "uuid": "lower-case canonical UUID str",
        "bigint": "64-bit int",
        "integer": "32-bit int",
        "double": "float",
        "boolean": "bool",
        "bytea": "bytes",
    }
    if ctype.element is not None:
        return f"list of {_python_expected(ctype.element)}"
    return spelled.get(ctype.declared, "Decimal or int" if ctype.declared.startswith("numeric") else "value")
