"""Errors raised inside Spark's Python tasks, raised again in the driver as themselves.

Spark wraps a Python worker's exception in its own (a PythonException, or a Py4JJavaError around
the task failure) with the worker's traceback as text, so the CLI would only see "Job aborted".
The errors eosflow gives an exit code to are found in that text by class name, and the message is
the traceback line that names it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def raised_in_workers(*kinds: type[Exception]) -> Iterator[None]:
    """Re-raise a worker's exception of one of `kinds` (by exact class name) as that class."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, kinds):
            raise
        text = str(exc)
        for kind in kinds:
            marker = f"{kind.__name__}: "
            line = next((line for line in text.splitlines() if marker in line), None)
            if line is not None:
                raise kind(line.split(marker, 1)[1].strip()) from None
        raise
