"""The randomized schedule with a stream (issue 27): `eosflow stream` beside the batch machine's steps.

A stream process commits micro-batches while the machine produces, runs batch ingests (in-process and as
processes, killed at random or at fault points) and backfills (catch-ups, replays, two replays at once)
of the same pipeline: every one of them races the stream, so any of them may be fenced, and none may
double, lose or invent a row. The stream's own steps:

- **stream started** (`eosflow stream`, a batch every 300 ms), **killed** (SIGKILL with its JVM),
  **paused** (SIGSTOP while an in-process run commits, then SIGCONT: a zombie that must be fenced);
- **drain**: the stream (started if need be) must bring the warehouse to every committed record
  within two minutes: a quiescent point, checked complete.

A stream that stops by itself is a violation (it only stops for what needs a person, and nothing here
does: retention and re-created topics stay the batch machine's). After every step the warehouse is
compared with the producer's model as in the batch machine; refused runs are not compared with their
footprint while the stream runs, since the stream commits as it goes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid

from hypothesis import strategies as st
from hypothesis.stateful import invariant

from eosflow.runners import job
from tests.random.machine import ScheduleMachine, _quiet, schedule_step
from tests.random.model import compare
from tests.random.world import Proc

STREAM = frozenset({"stream"})
DRAIN_S = 120.0


class StreamMachine(ScheduleMachine):
    runner = "stream"

    def __init__(self) -> None:
        super().__init__()
        self.stream: Proc | None = None

    @property
    def racing(self) -> bool:
        return self.stream is not None and self.stream.popen.poll() is None

    def teardown(self) -> None:
        self._stop_stream()
        super().teardown()

    def _stop_stream(self) -> None:
        if self.stream is not None:
            self.stream.kill()
            self.stream.wait(60)
            self.stream = None

    def _start_stream(self) -> None:
        log = self.home / f"stream-{uuid.uuid4().hex[:6]}.log"
        with log.open("w") as fh:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "eosflow.cli",
                    "stream",
                    "--pipeline",
                    self.pipe.name,
                    "--trigger",
                    "300ms",
                ],
                env=dict(os.environ, EOSFLOW_PIPELINES=str(self.pipelines_file)),
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.stream = Proc(popen, log, time.monotonic())
        for p in range(self.partitions):
            if self.started.get(p, "no") == "no":
                self.started[p] = "maybe"

    @invariant()
    def the_stream_runs_until_stopped(self) -> None:
        if self.stream is not None and self.stream.popen.poll() is not None:
            self._violation(
                f"the stream stopped by itself (exit {self.stream.popen.returncode}):\n{self.stream.tail(30)}"
            )

    # -- its own steps -----------------------------------------------------------------------------
    @schedule_step(4, runners=STREAM)
    def stream_started(self) -> None:
        self._begin("stream started")
        if self.racing:
            self._outcome("already running")
            return
        self._start_stream()
        self._outcome("started")

    @schedule_step(1, runners=STREAM, delay=st.floats(0, 6))
    def stream_killed(self, delay: float) -> None:
        """SIGKILL the stream (and its JVM) after a random moment: its open batch never commits."""
        self._begin("stream killed")
        if not self.racing:
            self._outcome("no stream running")
            return
        time.sleep(delay)
        self._stop_stream()
        self._fault("stream SIGKILL")
        self._outcome("killed")

    @schedule_step(2, runners=STREAM, hold=st.floats(0, 4))
    def stream_paused(self, hold: float) -> None:
        """SIGSTOP the stream, commit an in-process run meanwhile, SIGCONT: the stream's open batch is a
        zombie and must be fenced, never committed over the other run's ranges."""
        self._begin("stream paused while a batch run commits")
        if not self.racing:
            self._outcome("no stream running")
            return
        assert self.stream is not None
        os.killpg(self.stream.popen.pid, signal.SIGSTOP)
        self._fault("stream SIGSTOP")
        try:
            time.sleep(hold)
            label, _, exc = self._run(lambda: job.run(self.settings, self.pipe.name, log=_quiet), "a run")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.stream.popen.pid, signal.SIGCONT)
        self._outcome(label)
        if label == "committed":
            self._committed_normal(False)
            self.complete = True
        elif label != "fenced":  # a batch the stream committed just before its pause
            self._violation(f"a run beside a paused stream ended {label}: {exc}")

    @schedule_step(3, runners=STREAM)
    def drain(self) -> None:
        """The stream must bring the warehouse to every committed record: a quiescent point."""
        self._begin("stream drained")
        if not self.racing:
            self._start_stream()
        deadline = time.monotonic() + DRAIN_S
        while True:
            bad = compare(self.pipe, self.rows(self.pipe), complete=True)
            if not bad:
                break
            if time.monotonic() > deadline or not self.racing:
                self._violation(
                    f"the stream did not catch up in {DRAIN_S:.0f} s:\n  "
                    + "\n  ".join(bad[:6])
                    + f"\nits log:\n{self.stream.tail(30) if self.stream else ''}"
                )
            time.sleep(0.5)
        self._committed_normal(False)
        self.complete = True
        self._outcome("caught up")
