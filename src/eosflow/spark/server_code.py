"""Which eosflow a warm Spark Connect server's Python worker runs (DESIGN.md "A warm Spark": two kinds of
server). A run on a warm server ships no code, so each task checks that the eosflow its worker imported is
the run's own, before it reads a record (`Checked`, around the run's read).

The worker's digest is taken once per process, when first asked: the worker daemon
(eosflow.spark.worker_daemon) asks before it forks, so every worker reports the code the daemon imported,
even if the files changed on disk since.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from eosflow.errors import StackError

_loaded: str | None = None


class ServerCodeError(StackError):
    """The server's workers run another eosflow than the run: the installation, not the run."""


def loaded() -> str:
    """The digest of the eosflow this process imported (eosflow.spark.code_archive.code_digest)."""
    global _loaded
    if _loaded is None:
        from eosflow.spark.code_archive import code_digest

        _loaded = code_digest()
    return _loaded


def check(expected: str) -> None:
    """Refuse a task whose run is of other code than this worker's eosflow."""
    here = loaded()
    if here != expected:
        raise ServerCodeError(
            f"the Spark Connect server's Python workers run eosflow code {here}, this run's code is "
            f"{expected}; nothing was read or written. Install this eosflow in the server's Python and "
            "restart the server (the stack's: eosflow stack up --with spark-connect restarts it)"
        )


class Checked:
    """A RecordSource (eosflow.transform) whose tasks first check that their worker runs `code`: the read's
    function is called per range before the range's records are pulled, so nothing is read before."""

    def __init__(self, source: Any, code: str) -> None:
        self.source = source
        self.code = code

    def map(self, fn: Callable[[Iterator], Iterator], ddl: str) -> Any:
        code = self.code

        def checked(records: Iterator) -> Iterator:
            check(code)
            return fn(records)

        return self.source.map(checked, ddl)
