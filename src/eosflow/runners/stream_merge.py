"""A stream's merges of the small pieces its own commits leave (docs/DESIGN.md "Stream mode"), on a thread of
their own beside the batches.

Between two batches, a merge of a minute's children at 5,000 events/s stalled the stream 4.3-7.7 s (its p95
latency 1.6 s -> 9.0 s). Beside them, a batch waits only where both want one Kafka partition's position
lock, which a merge takes only to swap the partition's children for the one it has built (compact._merge).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg

from eosflow import pipelines
from eosflow.runners.stream_status import first_line
from eosflow.settings import Settings

Log = Callable[[str], None]


class Merger:
    """Every `every_s`, the sink's `compact_stream` on a connection of its own; a line per pass that merged.

    A failed pass is logged and the next one tries again: a merge moves committed rows between children in one
    transaction and changes none, so nothing waits on it."""

    def __init__(self, settings: Settings, pipeline: pipelines.Pipeline, every_s: float, log: Log) -> None:
        self._settings, self._pipeline, self._every_s, self._log = settings, pipeline, every_s, log
        self._stop = threading.Event()
        # daemon: a second Ctrl-C ends the process without waiting for a merge (its transaction rolls back)
        self._thread = threading.Thread(target=self._run, name="eosflow-stream-merge", daemon=True)

    def start(self) -> Merger:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask for no further pass, and wait for one in flight to commit or roll back."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        started = time.monotonic()
        # A pass every every_s from the start of the last: counted from its end, paced passes of 30 s came
        # every 90 s at 1m, and 186-540 children stood between them.
        while not self._stop.wait(max(0.0, started + self._every_s - time.monotonic())):
            started = time.monotonic()
            self.merge_once()

    def _between(self, pieces: int) -> bool:
        """A pass's pieces spread over half the interval: each copies rows on the cores the batches use,
        and six merges back to back (a minute at 5,000 events/s: 3.8-5.4 s) raised the stream's p95."""
        return not self._stop.wait(self._every_s / 2 / max(pieces, 1))

    def merge_once(self) -> None:
        started = time.monotonic()
        try:
            with psycopg.connect(self._settings.warehouse_dsn, autocommit=True) as conn:
                done = self._pipeline.sink.compact_stream(conn, self._pipeline, self._between)
        except psycopg.Error as exc:
            why = f"{type(exc).__name__}: {first_line(exc)}"
            self._log(f"merging the stream's small commits failed, left for the next time: {why}")
            return
        if done is not None:
            self._log(
                f"merged the stream's small commits over {time.monotonic() - started:.2f}s: {done.line()}"
            )
