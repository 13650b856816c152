"""The randomized schedule for a `sink: kafka` pipeline (issue 27): the batch machine's steps, Kafka's truth.

The machine is tests/random/machine.py's, with the pipeline writing to an output topic instead of a
table. What the sink holds is read back as a downstream consumer would (read_committed, the source
coordinates from each record's headers, dead letters from the dead-letter topic), and compared with the
same producer-side model. Its own steps:

- **offsets forgotten**: the consumer group deleted, as offset retention does to a partition idle for a
  week, or an operator's cleanup: the next run restores the positions from the ledger and repeats nothing;
- **replay refused**: a replay into a topic is refused before anything is written;
- with `slow_faults` (the soak, on a stack of its own): **a range slower than its transaction timeout**
  (the task paused inside its Kafka transaction: the run ends timed out, nothing visible) and **the broker
  paused** (SIGSTOP, then SIGCONT) under a running ingest: any outcome but a wrong one.

At quiescent points `eosflow verify` of the pipeline (the sink's own read-back) must pass too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient
from hypothesis import strategies as st

from eosflow import pipelines as pipelines_mod
from eosflow.sinks.kafka import produce
from eosflow.sources.kafka.read_back import partitions_of, read_to_end
from tests.random.machine import EXIT_LABEL, ScheduleMachine, schedule_step
from tests.random.model import PipelineModel, Rows
from tests.random.world import retried, spawn_ingest

KAFKA = frozenset({"kafka"})
TIMEOUT_MS = 15_000  # the machine's transaction_timeout_ms: far above a normal range's seconds


class KafkaSinkMachine(ScheduleMachine):
    runner = "kafka"
    mirrors = True  # its ledger mirrors the sink's truth (ScheduleMachine._settled_footprint)
    slow_faults = False  # the soak sets it: a timed-out range and a paused broker take 20-40 s a step

    def declaration(self, pipe: PipelineModel) -> dict:
        spec = super().declaration(pipe)
        del spec["target_table"]
        return {
            **spec,
            "sink": "kafka",
            "output_topic": output_topic(pipe),
            "output_format": "json",  # whatever the input's format: rows() reads the event ids as JSON
            "transaction_timeout_ms": TIMEOUT_MS,
        }

    def rows(self, pipe: PipelineModel) -> Rows:
        out = output_topic(pipe)
        output: dict = {}
        rejected: dict = {}
        for coords, m in _records(self.settings.kafka, (out, f"{out}.rejected")):
            if m.topic() == out:
                output.setdefault(coords, []).append(_event_id(m.value()))
            else:
                rejected.setdefault(coords, []).append(dict(m.headers()).get("eosflow-error", b"").decode())
        return Rows(output, rejected)

    def _all_visible(self, pipe: PipelineModel) -> None:
        """Wait until no transaction a killed run left open holds the output back (the broker aborts it
        after transaction_timeout_ms, or the next run of its partition does): a read_committed reader
        stops below an open transaction, so committed records above it are not seen yet. Found by the
        soak: a run killed inside its transactions, then an older killed run retried (its ranges
        committed; the newer run's transaction of a partition it did not plan still open), then
        retention: the model took committed records it could not see yet for records deleted unread."""
        from eosflow.sinks.kafka.transactions import held_back

        deadline = time.monotonic() + TIMEOUT_MS / 1000 + 15
        try:
            declared = pipelines_mod.load(self.settings, pipe.name, self.pipelines_file)
            while held_back(self.settings.kafka, declared) and time.monotonic() < deadline:
                time.sleep(1)
        except Exception:  # noqa: BLE001 - a retired pipeline, a paused broker: read what is visible
            return

    # in_commit: the ranges committed in Kafka (the truth), not yet mirrored in the ledger.
    committed_at = ("in_commit", "after_commit")
    all_or_nothing = False  # a transaction per partition: two racing runs may each win some

    def crash_point(self, point: str) -> str:
        # A Kafka sink stages nothing: its tasks' own point stands where the warehouse stages.
        return "in_kafka_transaction" if point == "after_stage" else point

    def _invariants(self, pipe: PipelineModel) -> None:
        if not self.complete or pipe is not self.pipe:
            return  # the read-back wants every range settled: the model checks the rest after every step
        declared = pipelines_mod.load(self.settings, pipe.name, self.pipelines_file)
        verdict = declared.sink.verify(self.settings, declared, False)
        if not verdict.ok:
            self._violation(f"eosflow verify failed at a quiescent point:\n{verdict.table()}")

    # -- its own steps -----------------------------------------------------------------------------
    @schedule_step(1, runners=KAFKA)
    def offsets_forgotten(self) -> None:
        """Kafka forgets the group's offsets; the next run must restore them from the ledger."""
        self._begin("offsets forgotten")
        if self.killed:
            # A run killed after its Kafka commit and before the ledger's mirror leaves the ledger behind:
            # with the offsets gone nothing can show what it committed, and eosflow refuses (tested in
            # tests/integration/test_kafka_sink.py). The operator's retry comes first here.
            self._outcome("skipped: a killed run is not retried yet")
            return
        admin = AdminClient(dict(self.settings.kafka))
        group = produce.group_id(self.pipe.name)

        def delete() -> None:
            for future in admin.delete_consumer_groups([group], request_timeout=30).values():
                future.result()

        try:
            retried(delete)
            self._fault("consumer group offsets removed")
            self._outcome("removed")
        except Exception as exc:  # noqa: BLE001 - a group never committed is not there to remove
            if "GROUP_ID_NOT_FOUND" not in str(exc):
                raise
            self._outcome("no group yet")

    @schedule_step(1, runners=KAFKA, partition=st.integers(0, 5))
    def replay_refused(self, partition: int) -> None:
        """A replay would append a second copy for every consumer: refused, nothing written."""
        self._replay_refused(partition, "second copy")

    @schedule_step(1, heavy=True, runners=KAFKA, when=lambda self: self.slow_faults)
    def range_times_out(self) -> None:
        """A task paused inside its Kafka transaction past transaction_timeout_ms: the broker aborts it."""
        self._begin("range slower than its transaction timeout", heavy=True)
        folder = self.home / f"pause-{uuid.uuid4().hex[:6]}"
        folder.mkdir()
        run_id = f"slow-{uuid.uuid4().hex[:8]}"
        proc = spawn_ingest(
            self.pipe.name,
            self.pipelines_file,
            self.home,
            ["--run-id", run_id],
            EOSFLOW_PAUSE_AT="in_kafka_transaction",
            EOSFLOW_FAULT_DIR=str(folder),
        )
        paused = _wait_for(folder / "in_kafka_transaction.paused", proc, 120)
        if paused:
            time.sleep(TIMEOUT_MS / 1000 + 12)  # past the timeout and the broker's 10 s check for it
            self._fault("transaction timed out")
        (folder / "in_kafka_transaction.resume").write_text("go")
        code = proc.wait()
        # A run with no record to read may still pause there: its first ranges or acknowledged losses
        # commit their offsets alone, and a transaction with no record in it holds nothing the broker
        # would abort for its age, so it commits. So does a range whose offsets hold no record a reader
        # gets (found by the soak: [29, 30) holding a transaction marker produced nothing, and the
        # coordinator starts a transaction's clock only when it hears of it).
        tail = proc.tail(40)
        offsets_only = "no new records" in tail or re.search(r"produced 0 records to \S+ and 0 to", tail)
        self._outcome(
            f"{EXIT_LABEL.get(code, f'exit {code}')}"
            + (" (offsets only)" if paused and offsets_only else "" if paused else " (nothing to read)")
        )
        if paused and code != 2 and not (offsets_only and code == 0):
            self._violation(
                f"a range past its transaction timeout ended {code}, not timed out:\n{proc.tail(25)}"
            )
        if not paused and code != 0 and not (code == 4 and self._may_lose()):
            self._violation(f"a run with nothing to read ended {code}:\n{proc.tail(25)}")
        if code == 0:
            self._committed_normal(False)
            self.complete = True

    @schedule_step(1, heavy=True, runners=KAFKA, when=lambda self: self.slow_faults, pause=st.floats(2, 20))
    def broker_paused(self, pause: float) -> None:
        """The broker SIGSTOPped under a running ingest, then SIGCONTed: late, failed or fenced, not wrong."""
        self._begin("broker paused under an ingest", heavy=True)
        pid = int((Path(self.settings.state_dir) / "kafka" / "kafka.pid").read_text())
        run_id = f"paused-{uuid.uuid4().hex[:8]}"
        proc = spawn_ingest(self.pipe.name, self.pipelines_file, self.home, ["--run-id", run_id])
        stopper = threading.Timer(2.0, lambda: os.kill(pid, signal.SIGSTOP))
        stopper.start()
        try:
            time.sleep(2.0 + pause)
        finally:
            stopper.cancel()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            _wait_for_broker(self.settings.kafka)  # the machine's own next requests need it answering
        self._fault("broker paused")
        code = proc.wait(timeout=600)
        self._outcome(EXIT_LABEL.get(code, f"exit {code}"))
        if code == 0:
            self._committed_normal(False)
            self.complete = True
        elif code in (1, 3):  # failed (a timeout against the paused broker) or fenced: retried later
            self.killed.append((run_id, self.partitions, set()))
        elif not (code == 4 and self._may_lose()):
            self._violation(f"an ingest under a paused broker ended {code}:\n{proc.tail(25)}")


def output_topic(pipe: PipelineModel) -> str:
    return f"{pipe.topic}.out{pipe.incarnation}"


def _records(kafka, topics: tuple[str, ...]):
    """(source coordinates, record) of every record of `topics`, read_committed, in one consumer."""
    starts = [(t, p, -2) for t in topics for p in partitions_of(kafka, t)]
    for m in read_to_end(kafka, starts, idle_s=30):
        h = dict(m.headers())
        coords = (
            h["eosflow-source-topic"].decode(),
            int(h["eosflow-source-partition"]),
            int(h["eosflow-source-offset"]),
        )
        yield coords, m


def _event_id(value: bytes | None) -> str | None:
    return None if value is None else json.loads(value).get("event_id")


def _wait_for_broker(kafka, timeout: float = 60.0) -> None:
    admin = AdminClient(dict(kafka))
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=5)
            return
        except Exception:  # noqa: BLE001 - still waking up
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _wait_for(path: Path, proc, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.popen.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
