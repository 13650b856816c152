"""The randomized schedule (issue 13): Hypothesis' stateful testing against the real Kafka and Postgres.

Each machine instance is a fresh pipeline (its own topic, target table and pipelines file). Its rules
produce (committed and aborted transactions, plain writes, idle partitions, poison records with and
without NULs), add partitions, delete records as retention does, re-create the topic, and run
ingests every way eosflow runs: in-process, as a process killed by SIGKILL at a random moment or at
a named fault point, two at once, catch-up and replay backfills (with a failing chunk), retries of
killed runs, and `eosflow ingest --range` requests that must be refused.

After every step the warehouse is compared with tests/random/model.py (built from the producer's
side only, never from eosflow's ledger or positions), and I1-I5 (eosflow.sinks.postgres.invariants) and
I6 (event ids unique) are checked. Each rule also checks what the contract says its own outcome must
be (a refused run writes nothing; data loss is refused unless acknowledged; ...).

A violation raises AssertionError, so Hypothesis shrinks and prints the step list; `Stats` counts
every step kind, fault and outcome for the report (tests/random/soak.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import yaml
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from eosflow import pipelines as pipelines_mod
from eosflow.faults import SINK_FAULT_POINTS
from eosflow.ledger import positions
from eosflow.ledger.backfill import BackfillError, BackfillRequest
from eosflow.ledger.migrate import migrate
from eosflow.ledger.mirror import CommitTimedOutError
from eosflow.ledger.planner import DataLossError, PositionBeyondLogError, TopicRecreatedError
from eosflow.ledger.ranges import OffsetRange, batch_id_for
from eosflow.runners import backfill_run, job
from eosflow.settings import Settings
from eosflow.sinks.postgres import invariants
from eosflow.sources.kafka.range_read import ReadDataLossError
from eosflow.spark import job_main as ingest_cli
from eosflow_dev.stack.spark_connect import SparkConnectService
from tests import orders
from tests.random.formats import FORMATS, Codec
from tests.random.model import PipelineModel, Rows, compare
from tests.random.world import POISON, Kafka, footprint, read_rows, spawn_ingest

MAX_PARTITIONS = 6
CRASH_POINTS = ("after_plan", "before_read", "after_stage", "in_commit", "after_commit")
CHUNK_CRASH_POINTS = ("after_plan", "after_stage", "in_commit", "after_commit")
VALIDATION_CASES = (
    "beyond_end",
    "replay_never_committed",
    "other_topic",
    "no_mode",
    "below_log_start",
    "reversed",
)
EXIT_LABEL = {
    0: "committed",
    2: "refused",
    3: "fenced",
    4: "data loss refused",
    5: "refused (counts)",
    -9: "killed",
}


# The runners a machine drives: "batch" (this module: a warehouse pipeline run by eosflow ingest and
# backfills), "kafka" (tests/random/kafka_sink.py), "stream" (tests/random/stream.py). The publisher has
# a machine of its own (tests/random/publisher.py): it reads an outbox, not a topic.
EVERY_RUNNER = frozenset({"batch", "kafka", "stream", "iceberg"})
WITHOUT_STREAM = frozenset({"batch", "kafka", "iceberg"})  # retention and re-created topics
BATCH = frozenset({"batch"})  # the randomized batch schedule's own steps
REPLAYS = frozenset({"batch", "stream", "iceberg"})  # replays: refused for a Kafka sink (its own step)


@dataclass(frozen=True)
class StepKind:
    weight: int
    heavy: bool
    when: object
    strategies: dict
    runners: frozenset


STEPS: dict[str, StepKind] = {}


def schedule_step(weight: int, heavy: bool = False, when=None, runners=EVERY_RUNNER, **strategies):
    """One kind of step, drawn by ScheduleMachine.step with this weight (Hypothesis' rules are not weighted).

    heavy: runs job processes (seconds each); at most one every `heavy_gap` steps.
    when: a condition on the model (never on timing: Hypothesis replays draws, not the world).
    runners: the machines that draw it (ScheduleMachine.runner).
    """

    def register(fn):
        STEPS[fn.__name__] = StepKind(weight, heavy, when, strategies, frozenset(runners))
        return fn

    return register


class Violation(AssertionError):
    """What the machine found: the contract broken, or a run failing in a way it never may."""


@dataclass
class Stats:
    """Counts across machine instances, for the report."""

    steps: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    machines: int = 0

    @property
    def total_steps(self) -> int:
        return sum(self.steps.values())


def _label(exc: BaseException) -> str:
    for kind, name in (
        (positions.FencedError, "fenced"),
        (DataLossError, "data loss refused"),
        (ReadDataLossError, "data loss at read"),
        (TopicRecreatedError, "refused: topic re-created"),
        (BackfillError, "refused by validation"),
        (positions.ReplayCountError, "refused: replay count"),
        (PositionBeyondLogError, "refused: position beyond log"),
        (CommitTimedOutError, "timed out"),
    ):
        if isinstance(exc, kind):
            return name
    return "FAILED"


class Bookkeeping(RuleBasedStateMachine):
    """What every schedule machine keeps for the report: steps, faults, outcomes, the history a violation
    lists (the batch machine here, the publisher's in tests/random/publisher.py)."""

    runner = ""  # the subclass's: which runner it drives (the reports' and violations' name)
    # Set by the runner (tests/random/test_random_schedule.py, tests/random/soak.py).
    settings: Settings
    stats: Stats = Stats()
    workdir: Path = Path("/tmp/eosflow-random")
    heavy_gap: int = 4  # steps between two process-based (slow) steps
    trace: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.uid = uuid.uuid4().hex[:8]
        self.step_no = 0
        self.since_heavy = 0
        self.history: list[str] = []  # the steps so far, as the violation report lists them
        self.stats.machines += 1
        self._kind = "setup"
        self._step_started = time.monotonic()

    # -- bookkeeping -------------------------------------------------------------------------------
    def _begin(self, kind: str, heavy: bool = False) -> None:
        self.step_no += 1
        self.stats.steps[kind] += 1
        self.since_heavy = 0 if heavy else self.since_heavy + 1
        self._kind = kind
        self._step_started = time.monotonic()
        if self.trace:
            print(f"[{self.uid}] step {self.step_no}: {kind}", flush=True)

    def _outcome(self, what: str) -> None:
        self.stats.outcomes[f"{self._kind}: {what}"] += 1

    def _fault(self, what: str, n: int = 1) -> None:
        self.stats.faults[what] += n

    def _violation(self, message: str) -> None:
        text = (
            f"{self.runner} machine {self.uid}, step {self.step_no} ({self._kind}): {message}\n"
            "steps of this machine:\n  " + "\n  ".join(self.history)
        )
        self.stats.violations.append(text)
        raise Violation(text)


class ScheduleMachine(Bookkeeping):
    runner = "batch"  # which steps it draws (schedule_step's runners)
    server_killed = False  # whether a warm_server_killed step killed the Spark Connect server in this run

    def __init__(self) -> None:
        super().__init__()
        self.home = self.workdir / self.uid
        self.home.mkdir(parents=True, exist_ok=True)
        self.pipelines_file = self.home / "pipelines.yml"
        self._old_env = os.environ.get("EOSFLOW_PIPELINES")
        os.environ["EOSFLOW_PIPELINES"] = str(self.pipelines_file)
        self.kafka = Kafka(self.settings.bootstrap_servers, f"random.{self.uid}")
        self.dsn = self.settings.warehouse_dsn
        if not getattr(type(self), "_migrated", False):  # a fresh warehouse (the soak's stack) too
            migrate(self.dsn, log=lambda m: None)
            type(self)._migrated = True
        self.partitions = 0
        self.started: dict[int, str] = {}  # partition -> "no" | "maybe" | "yes": has its history begun?
        # Runs to retry: (run id, partitions then, the unacknowledged losses it acknowledged, if it did).
        self.killed: list[tuple[str, int, set]] = []
        self.complete = False  # the step ended at a quiescent point
        self.pipes: list[PipelineModel] = []

    # -- the pipelines -----------------------------------------------------------------------------
    @property
    def pipe(self) -> PipelineModel:
        return self.pipes[-1]

    def _new_pipeline(self) -> None:
        name = f"r{self.uid}_{len(self.pipes)}"
        self.pipes.append(PipelineModel(name, self.kafka.topic, f"raw.{name}", incarnation=len(self.pipes)))
        spec = {p.name: self.declaration(p) for p in self.pipes}
        self.pipelines_file.write_text(yaml.safe_dump({"pipelines": spec}))
        self.started = dict.fromkeys(range(self.partitions), "no")
        self.killed = []

    # -- what differs by sink (tests/random/kafka_sink.py overrides these) ---------------------------
    def declaration(self, pipe: PipelineModel) -> dict:
        """The pipeline's entry in pipelines.yml: the orders declaration into a warehouse table."""
        return {
            "topics": [pipe.topic],
            "target_table": pipe.table,
            **orders.declaration(),
            "format": self.kafka.codec.declared,
            "transform_version": "v1",
            "initial_offset": "earliest",
            "max_records_per_partition": 100_000,
            "max_value_bytes": 4096,
        }

    def rows(self, pipe: PipelineModel) -> Rows:
        """What the sink holds for the pipeline, by source coordinates."""
        return read_rows(self.dsn, pipe.name, pipe.table)

    def crash_point(self, point: str) -> str:
        """The fault point a drawn one stands for in this machine's runs."""
        return point

    # The fault points a run dies at having committed: the sink's truth holds its ranges.
    committed_at: tuple[str, ...] = ("after_commit",)
    # A run commits all its partitions or none (one Postgres transaction); a Kafka sink commits each
    # partition in a transaction of its own, so two racing runs may each win some and both end fenced.
    all_or_nothing = True

    @property
    def racing(self) -> bool:
        """Another runner of the pipeline may commit at any moment (a stream): a run may then be fenced,
        and a refused run's footprint may change by the other's commits."""
        return False

    def _replay_refused(self, partition: int, because: str) -> None:
        """A sink that refuses replays: refused before anything is written, for the reason it gives."""
        self._begin("replay refused")
        before = self._settled_footprint()
        request = BackfillRequest(
            self.pipe.name, "replay", (partition % self.partitions,), 0, 1, chunk_size=10
        )
        try:
            backfill_run.resolve(self.settings, request)
            self._violation(f"a replay into a {self.runner} sink validated")
        except BackfillError as exc:
            self._outcome("refused" if because in str(exc) else "refused for another reason")
        self._unchanged(before, "the replay was refused")

    def _heavy_ok(self) -> bool:
        return self.since_heavy >= self.heavy_gap

    def _footprint(self, pipe: PipelineModel | None = None) -> tuple:
        pipe = pipe or self.pipe
        return footprint(self.dsn, pipe.name, self.rows(pipe))

    # A sink whose truth is outside the warehouse (Kafka, Iceberg): every run first mirrors into the
    # ledger what the sink committed and the ledger lacks (a run killed after the sink's commit), refused
    # requests included. The footprint a step compares with is taken after that mirror, so only what the
    # step itself writes counts. The warehouse sink has nothing to mirror.
    mirrors = False

    def _all_visible(self, pipe: PipelineModel) -> None:
        """Wait until everything committed is visible to the sink's readers (a Kafka sink: no
        transaction a killed run left open holds its output back); the warehouse's is at once."""

    def _settled_footprint(self) -> tuple:
        if self.mirrors:
            import psycopg

            declared = pipelines_mod.load(self.settings, self.pipe.name, self.pipelines_file)
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    declared.sink.prepare(conn, self.settings, declared, _quiet)
            except Exception:  # noqa: BLE001 - nothing made yet, or a refusal the step itself will meet
                pass
        return self._footprint()

    def _unchanged(self, before: tuple, what: str) -> None:
        if self.racing:
            return  # the other runner commits as it goes: nothing to compare with
        if self._footprint() != before:
            self._violation(f"{what} but the warehouse changed (rows, ledger or positions)")

    def _run(self, fn, what: str):
        """An in-process run: (label, summary, exception); an unexpected failure is a violation."""
        try:
            summary = fn()
        except Exception as exc:  # noqa: BLE001 - classified below
            label = _label(exc)
            if label == "FAILED":
                self._violation(
                    f"{what} failed instead of committing or refusing: {type(exc).__name__}: "
                    f"{str(exc)[:600]}\n{''.join(traceback.format_exception(exc))[-1500:]}"
                )
            return label, None, exc
        outcomes = {s.outcome for s in summary} if isinstance(summary, list) else {summary.outcome}
        return ("committed" if positions.COMMITTED in outcomes else "already committed"), summary, None

    def _may_lose(self, parts: set[int] | None = None) -> bool:
        """Some partition's log start moved past a point its history may have reached: loss is possible."""
        return any(
            self.started.get(p, "no") != "no" for p in self.pipe.unsettled() if parts is None or p in parts
        )

    def _must_lose(self, parts: set[int] | None = None) -> bool:
        return any(p in parts for p, _ in self.pipe.lost_pending) if parts else bool(self.pipe.lost_pending)

    def _settle_committed_kills(self) -> None:
        """A killed run may have died after its commit (a kill at after_commit, or a late random one):
        what it acknowledged is settled from then on, whether or not its retry has run yet. Whether it
        committed is a fact of the kill's timing, so the model asks the warehouse for that batch alone."""
        for run_id, _, acked in self.killed:
            if not acked:
                continue
            with psycopg.connect(self.dsn) as conn:
                row = conn.execute(
                    "select status from eosflow.plans where batch_id = %s",
                    (batch_id_for(self.pipe.name, run_id),),
                ).fetchone()
            if row is not None and row[0] == "committed":
                self.pipe.lost_acked |= acked & (self.pipe.lost_pending | self.pipe.lost_maybe)
                self.pipe.lost_pending -= acked
                self.pipe.lost_maybe -= acked

    def _committed_normal(self, acknowledged: bool, partitions: int | None = None) -> None:
        """A normal run (every partition) committed: what that settles in the model."""
        pipe = self.pipe
        self._settle_committed_kills()
        if pipe.lost_pending and not acknowledged:
            self._violation(
                f"a run without --acknowledge-data-loss committed although retention deleted "
                f"{len(pipe.lost_pending)} committed record(s) before they were read, e.g. "
                f"{sorted(pipe.lost_pending)[:3]} (deletions (step, partition, below): {pipe.deletions})"
            )
        pipe.acknowledged()
        # Where a killed run may have begun the history: acknowledged, or never begun (then the
        # history begins at the log start): either way they are not the pipeline's to read.
        pipe.lost_acked |= pipe.lost_maybe
        pipe.lost_maybe = set()
        pipe.settle()
        pipe.ever_committed = True
        for p in range(self.partitions if partitions is None else partitions):
            self.started[p] = "yes"

    # -- set-up ------------------------------------------------------------------------------------
    @initialize(partitions=st.integers(1, 4), value_format=st.sampled_from(FORMATS))
    def create_topic(self, partitions: int, value_format: str = "json") -> None:
        self._begin("create topic")
        self.history.append(f"1. create_topic(partitions={partitions}, value_format={value_format!r})")
        self.kafka.codec = Codec.register(value_format, self.settings.registry, self.kafka.topic)
        self._fault(f"value format: {value_format}")
        self.kafka.create(partitions)
        self.partitions = partitions
        self._new_pipeline()

    def teardown(self) -> None:
        with contextlib.suppress(Exception):  # best effort: the shared stack keeps no debris
            self.kafka.delete()
        if self._old_env is None:
            os.environ.pop("EOSFLOW_PIPELINES", None)
        else:
            os.environ["EOSFLOW_PIPELINES"] = self._old_env

    @rule(data=st.data())
    def step(self, data) -> None:
        """One step: its kind drawn by weight among the kinds possible now, then its arguments."""
        names = [
            name
            for name, kind in STEPS.items()
            if self.runner in kind.runners
            and (not kind.heavy or self._heavy_ok())
            and (kind.when is None or kind.when(self))
        ]
        name = data.draw(st.sampled_from([n for n in names for _ in range(STEPS[n].weight)]), label="step")
        kwargs = {k: data.draw(v, label=k) for k, v in STEPS[name].strategies.items()}
        self.history.append(
            f"{self.step_no + 1}. {name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
        )
        getattr(self, name)(**kwargs)

    # -- producing ---------------------------------------------------------------------------------
    @schedule_step(
        6,
        batches=st.lists(
            st.fixed_dictionaries(
                {
                    "n": st.integers(1, 12),
                    "fate": st.sampled_from(["commit", "commit", "abort", "plain"]),
                    "partitions": st.lists(
                        st.integers(0, MAX_PARTITIONS - 1), min_size=1, max_size=3, unique=True
                    ),
                    "poison": st.lists(st.sampled_from(POISON), max_size=3),
                }
            ),
            min_size=1,
            max_size=3,
        ),
    )
    def produce(self, batches: list[dict]) -> None:
        self._begin("produce")
        for b in batches:
            targets = sorted({p % self.partitions for p in b["partitions"]})
            kinds = ["valid"] * b["n"] + list(b["poison"])
            records = [
                (targets[i % len(targets)], kind, self.step_no * 100 + i) for i, kind in enumerate(kinds)
            ]
            for rec in self.kafka.send(records, b["fate"], self.step_no):
                self.pipe.add(rec)
            self._fault(
                {"commit": "transaction committed", "abort": "transaction aborted", "plain": "plain write"}[
                    b["fate"]
                ]
            )
            for kind in b["poison"]:
                self._fault(f"poison record: {kind}")
        idle = self.partitions - len({r.partition for r in self.pipe.records.values()})
        if idle:
            self._fault("step with idle partitions")

    @schedule_step(1, when=lambda self: self.partitions < MAX_PARTITIONS, more=st.integers(1, 2))
    def add_partitions(self, more: int) -> None:
        self._begin("add partitions")
        grown = min(MAX_PARTITIONS, self.partitions + more)
        self.kafka.grow(grown)
        for p in range(self.partitions, grown):
            self.started[p] = "no"
        self._fault("partitions added", grown - self.partitions)
        self.partitions = grown

    @schedule_step(
        2,
        runners=WITHOUT_STREAM,
        partition=st.integers(0, MAX_PARTITIONS - 1),
        share=st.sampled_from([0.3, 0.6, 1.0]),
    )
    def retention(self, partition: int, share: float) -> None:
        """Delete records below an offset, as retention does; some may not have been read yet."""
        self._begin("retention")
        p = partition % self.partitions
        start, end = self.kafka.offsets(p)
        below = start + round((end - start) * share)
        if below <= start:
            self._outcome("nothing to delete")
            return
        self._all_visible(self.pipe)
        present = self.rows(self.pipe).coords()
        log_start = self.kafka.delete_records(p, below)
        if log_start != below:
            self._violation(f"delete_records({p}, {below}) left the log start at {log_start}")
        taken = self.pipe.delete_below(self.step_no, p, below, present)
        if self.started.get(p, "no") == "no":
            # The partition's history has not begun: it begins at the new log start, no loss.
            self.pipe.lost_acked |= {k for k in self.pipe.lost_pending if k[0] == p}
            self.pipe.lost_pending = {k for k in self.pipe.lost_pending if k[0] != p}
            self._outcome("deleted before the history began")
        elif self.started[p] == "maybe":
            maybe = {k for k in self.pipe.lost_pending if k[0] == p}
            self.pipe.lost_pending -= maybe
            self.pipe.lost_maybe |= maybe
            self._outcome("deleted, history may have begun")
        else:
            self._outcome("deleted unread records" if taken else "deleted read or empty offsets")
        self._fault("retention: records deleted")
        if below == end:
            self._fault("retention: partition emptied")
        if taken:
            self._fault("retention: committed records deleted unread", taken)

    @schedule_step(
        1, heavy=True, runners=WITHOUT_STREAM, partitions=st.integers(1, 4), produce_after=st.integers(0, 8)
    )
    def recreate_topic(self, partitions: int, produce_after: int) -> None:
        """Delete the topic and create it again under the same name: the pipeline must refuse it for good."""
        self._begin("topic re-created", heavy=True)
        old = self.pipe
        label, _, exc = self._run(
            lambda: job.run(self.settings, old.name, acknowledge_data_loss=True, log=_quiet),
            "the run before re-creation",
        )
        if label == "committed":
            self._committed_normal(True)
            self.complete = True
            self._check_current()
            self.complete = False
        else:
            self._violation(f"the run before re-creating the topic did not commit: {label}: {exc}")
        self.kafka.delete()
        self.kafka.create(partitions)
        self._fault("topic re-created")
        self._all_visible(old)
        frozen = self.rows(old)
        before = self._settled_footprint()
        fresh = PipelineModel("(new incarnation)", old.topic, "", incarnation=old.incarnation + 1)
        if produce_after:
            for rec in self.kafka.send(
                [(i % partitions, "valid", self.step_no * 100 + i) for i in range(produce_after)],
                "commit",
                self.step_no,
            ):
                fresh.add(rec)
        label, _, exc = self._run(
            lambda: job.run(self.settings, old.name, log=_quiet), "the run after re-creation"
        )
        self._outcome(f"old pipeline: {label}")
        if label != "refused: topic re-created":
            self._violation(
                f"an ingest of the re-created topic with the old pipeline ended {label}, not refused: {exc}"
            )
        self._unchanged(before, "the old pipeline was refused")
        try:
            backfill_run.resolve(self.settings, BackfillRequest(old.name, "catch-up", None, chunk_size=5))
            self._violation("a catch-up of the re-created topic with the old pipeline was not refused")
        except BackfillError:
            self._outcome("old pipeline backfill: refused by validation")
        old.retired, old.frozen = True, frozen
        self.partitions = partitions
        self._new_pipeline()
        for rec in fresh.records.values():
            self.pipe.add(rec)

    @schedule_step(1, runners=WITHOUT_STREAM, when=lambda self: any(p.retired for p in self.pipes))
    def ingest_retired(self) -> None:
        self._begin("ingest of a retired pipeline")
        old = next(p for p in reversed(self.pipes) if p.retired)
        before = self._footprint(old)
        label, _, exc = self._run(
            lambda: job.run(self.settings, old.name, log=_quiet), "a retired pipeline's run"
        )
        self._outcome(label)
        if label != "refused: topic re-created":
            self._violation(f"a pipeline whose topic was re-created ran: {label} {exc}")
        if self._footprint(old) != before:
            self._violation("a refused run of a retired pipeline changed the warehouse")

    # -- ingesting ---------------------------------------------------------------------------------
    @schedule_step(5, max_records=st.sampled_from([None, None, 3, 8]), acknowledge=st.booleans())
    def ingest(self, max_records: int | None, acknowledge: bool) -> None:
        self._begin("ingest")
        self._ingest_in_process(max_records, acknowledge, run_id=None)

    def _ingest_in_process(self, max_records: int | None, acknowledge: bool, run_id: str | None) -> str:
        before = self._settled_footprint()
        may = self._may_lose()
        label, summary, exc = self._run(
            lambda: job.run(self.settings, self.pipe.name, run_id, max_records, acknowledge, log=_quiet),
            "an ingest",
        )
        self._outcome(label + (" (acknowledging loss)" if acknowledge and may else ""))
        if label == "committed":
            self._committed_normal(acknowledge)
            self.complete = max_records is None  # nothing left: every record must be there
        elif label == "data loss refused":
            self._unchanged(before, "the run was refused for data loss")
            if acknowledge:
                self._violation(f"a run acknowledging data loss was refused for it: {exc}")
            if not may:
                self._violation(f"data loss reported although no history was cut by retention: {exc}")
            for r in getattr(exc, "missing", []):
                if r.partition not in self.pipe.unsettled() or self.started.get(r.partition) == "no":
                    self._violation(f"data loss reported for {r}, whose partition lost nothing unread: {exc}")
        elif not (label == "fenced" and self.racing):
            self._violation(f"an ingest ended {label}: {exc}")
        return label

    @schedule_step(2, heavy=True, delay=st.floats(0.5, 12.0), acknowledge=st.booleans())
    def ingest_killed(self, delay: float, acknowledge: bool) -> None:
        """`eosflow ingest` as a process, SIGKILLed (with its Spark JVM) after a random delay."""
        self._begin("ingest killed at a random moment", heavy=True)
        run_id = f"kill-{uuid.uuid4().hex[:8]}"
        proc = spawn_ingest(
            self.pipe.name,
            self.pipelines_file,
            self.home,
            ["--run-id", run_id, *(["--acknowledge-data-loss"] if acknowledge else [])],
        )
        try:
            proc.popen.wait(timeout=delay)
        except Exception:  # noqa: BLE001 - still running: the moment has come
            proc.kill()
            self._fault("SIGKILL at a random moment")
        code = proc.wait()
        self._process_ended(code, proc, run_id, acknowledge)

    @schedule_step(1, heavy=True, runners=BATCH, delay=st.floats(0.2, 5.0))
    def warm_server_killed(self, delay: float) -> None:
        """`eosflow ingest` with its Spark work on the stack's Spark Connect server (DESIGN.md "A warm
        Spark"), the server SIGKILLed after a random moment (once per test run), then started again: the run
        committed before it, or it failed with nothing committed and the orchestrator retries it
        (`retry_killed`)."""
        self._begin("Spark Connect server killed mid-run", heavy=True)
        server = SparkConnectService(self.settings)
        server.start(log=_quiet)
        run_id = f"warm-{uuid.uuid4().hex[:8]}"
        proc = spawn_ingest(
            self.pipe.name,
            self.pipelines_file,
            self.home,
            ["--run-id", run_id],
            EOSFLOW_SPARK_REMOTE=server.endpoint(),
            EOSFLOW_INLINE_MAX_OFFSETS="0",
        )
        killed = False
        try:
            # Killed once per test run (a restart costs ~30 s on a busy machine); later draws run through it.
            proc.popen.wait(timeout=None if ScheduleMachine.server_killed else delay)
        except Exception:  # noqa: BLE001 - still running: the moment has come
            if (pid := server.pid()) is not None:
                os.kill(pid, signal.SIGKILL)
                killed = ScheduleMachine.server_killed = True
                self._fault("Spark Connect server SIGKILL")
        code = proc.wait()
        while killed and server.pid() is not None:
            time.sleep(0.1)
        server.start(log=_quiet)  # the next warm run finds it back
        # Its Spark action failed (exit 1, nothing committed): for the model, a run that died there.
        self._process_ended(-9 if killed and code == 1 else code, proc, run_id, False)

    @schedule_step(2, heavy=True, point=st.sampled_from(CRASH_POINTS), acknowledge=st.booleans())
    def ingest_crashes(self, point: str, acknowledge: bool) -> None:
        """`eosflow ingest` SIGKILLing itself at a named step boundary (EOSFLOW_CRASH_AT)."""
        self._begin("ingest killed at a fault point", heavy=True)
        point = self.crash_point(point)
        run_id = f"crash-{uuid.uuid4().hex[:8]}"
        proc = spawn_ingest(
            self.pipe.name,
            self.pipelines_file,
            self.home,
            ["--run-id", run_id, *(["--acknowledge-data-loss"] if acknowledge else [])],
            EOSFLOW_CRASH_AT=point,
        )
        code = proc.wait()
        if code == -9 or (point in SINK_FAULT_POINTS and code == 1):
            self._fault(f"SIGKILL at {point}")
            code = -9  # a task's worker killed fails the job: the run died where the point says
        self._process_ended(code, proc, run_id, acknowledge)

    def _process_ended(self, code: int, proc, run_id: str, acknowledge: bool) -> None:
        label = EXIT_LABEL.get(code, f"exit {code}")
        self._outcome(label)
        if code == -9:
            acked = set(self.pipe.lost_pending | self.pipe.lost_maybe) if acknowledge else set()
            self.killed.append((run_id, self.partitions, acked))
            for p in range(self.partitions):
                if self.started[p] == "no":
                    self.started[p] = "maybe"
        elif code == 0:
            self._committed_normal(acknowledge)
            self.complete = True
        elif code == 3 and self.racing:
            pass  # the stream committed those ranges first
        elif code == 4:
            if acknowledge or not self._may_lose():
                self._violation(
                    f"a process run was refused for data loss (acknowledging: {acknowledge}):\n{proc.tail()}"
                )
        else:
            self._violation(f"a process run ended {label}:\n{proc.tail(25)}")

    @schedule_step(
        1,
    )
    def retry_killed(self) -> None:
        """The orchestrator's retry: the killed run's id again, so its persisted plan is reused."""
        # No precondition: whether a run was killed depends on timing, and Hypothesis needs the
        # rules it may choose to depend on its own draws only.
        self._begin("retry of a killed run")
        if not self.killed:
            self._outcome("no killed run to retry")
            return
        run_id, partitions, acked = self.killed.pop(0)
        before = self._settled_footprint()
        label, summary, exc = self._run(
            lambda: job.run(self.settings, self.pipe.name, run_id, log=_quiet), "a retry"
        )
        self._outcome(label)
        if label in ("committed", "already committed"):
            for p in range(partitions):
                self.started[p] = "yes"
            self.pipe.ever_committed = True
            # The killed run's plan (persisted before it died) acknowledged the losses known then:
            # its commit settles them, as the run would have (found by the soak: a model bug, not eosflow's).
            self.pipe.lost_acked |= acked & (self.pipe.lost_pending | self.pipe.lost_maybe)
            self.pipe.lost_pending -= acked
            self.pipe.lost_maybe -= acked
        elif label in ("fenced", "data loss at read") or (label == "data loss refused" and self._may_lose()):
            self._unchanged(before, f"the retry was {label}")
        else:
            self._violation(f"a retry of a killed run ended {label}: {exc}")

    @schedule_step(2, heavy=True, delay=st.sampled_from([0.0, 2.0, 6.0, 12.0]), acknowledge=st.booleans())
    def two_ingests_at_once(self, delay: float, acknowledge: bool) -> None:
        """A process run and an in-process run of the same pipeline, overlapping: one commits each range."""
        self._begin("two concurrent ingests", heavy=True)
        ack = ["--acknowledge-data-loss"] if acknowledge else []
        proc = spawn_ingest(
            self.pipe.name, self.pipelines_file, self.home, ["--run-id", f"a-{uuid.uuid4().hex[:8]}", *ack]
        )
        time.sleep(delay)
        label, _, exc = self._run(
            lambda: job.run(self.settings, self.pipe.name, acknowledge_data_loss=acknowledge, log=_quiet),
            "the second of two runs",
        )
        code = proc.wait()
        self._outcome(f"process {EXIT_LABEL.get(code, code)}, in-process {label}")
        labels = {EXIT_LABEL.get(code, f"exit {code}"), label}
        if not labels <= {"committed", "fenced", "data loss refused"}:
            self._violation(
                f"two concurrent runs ended: process {code}, in-process {label} {exc}\n{proc.tail(25)}"
            )
        if labels == {"fenced"} and not self.racing and self.all_or_nothing:
            self._violation("both concurrent runs were fenced: neither committed")
        if labels == {"fenced"}:  # each may have committed some partitions: their histories may have begun
            for p in range(self.partitions):
                if self.started.get(p, "no") == "no":
                    self.started[p] = "maybe"
        if "data loss refused" in labels and (acknowledge or not self._may_lose()):
            self._violation(
                f"a concurrent run was refused for data loss (acknowledging: {acknowledge}) "
                f"{exc}\n{proc.tail()}"
            )
        if "committed" in labels:
            self._committed_normal(acknowledge)
            self.complete = True

    # -- backfills ---------------------------------------------------------------------------------
    @schedule_step(
        2, chunk_size=st.sampled_from([2, 5, 10]), only=st.none() | st.integers(0, MAX_PARTITIONS - 1)
    )
    def catch_up(self, chunk_size: int, only: int | None) -> None:
        self._begin("catch-up backfill")
        parts = None if only is None else (only % self.partitions,)
        chosen = set(parts) if parts else set(range(self.partitions))
        before = self._settled_footprint()
        request = BackfillRequest(self.pipe.name, "catch-up", parts, chunk_size=chunk_size)
        try:
            chunks = backfill_run.resolve(self.settings, request)
        except BackfillError as exc:
            self._refused_backfill(exc, chosen, before)
            return
        if self._must_lose(chosen):
            self._violation(
                f"a catch-up over records deleted unread validated: {sorted(self.pipe.lost_pending)[:3]}"
            )
        if len(chunks) > 12:  # keep the step cheap: fewer, larger chunks
            spans = max(c.end for c in chunks) - min(c.start for c in chunks)
            request = BackfillRequest(
                self.pipe.name, "catch-up", parts, chunk_size=max(chunk_size, spans // 8 + 1)
            )
            chunks = backfill_run.resolve(self.settings, request)
        run_id = f"catchup-{uuid.uuid4().hex[:8]}"
        label, _, exc = self._run(
            lambda: backfill_run.run(self.settings, request, run_id, chunks, log=_quiet), "a catch-up"
        )
        self._outcome(f"{label} ({len(chunks)} chunks)" if label == "committed" else label)
        if label == "fenced" and self.racing:
            return  # the stream took those offsets first: nothing of the chunk committed
        if (
            label == "refused by validation"
            and self.racing
            and "must start at the stored position" in str(exc)
        ):
            return  # the stream committed between the request's validation and its run: refused, nothing run
        if label != "committed":
            self._violation(f"a validated catch-up of {len(chunks)} chunks ended {label}: {exc}")
        self._caught_up({c.partition for c in chunks})
        self.pipe.ever_committed = True
        if parts is None and not self.pipe.lost_pending:
            self.complete = True  # every partition read to its end, as resolved just now

    def _caught_up(self, parts: set[int]) -> None:
        for p in parts:
            self.started[p] = "yes"
            self.pipe.settled_floor[p] = self.pipe.floor.get(p, 0)
        self.pipe.lost_acked |= {k for k in self.pipe.lost_maybe if k[0] in parts}
        self.pipe.lost_maybe = {k for k in self.pipe.lost_maybe if k[0] not in parts}

    def _refused_backfill(self, exc: BackfillError, chosen: set[int], before: tuple) -> None:
        text = str(exc)
        if "empty in every partition" in text:
            self._outcome("nothing to catch up")
        elif "below the log start" in text and self._may_lose(chosen):
            self._outcome("refused: below the log start")
        else:
            self._violation(f"a catch-up was refused unexpectedly: {text}")
        if self._must_lose(chosen) and "below the log start" not in text:
            self._violation(f"a catch-up over records deleted unread was not refused for it: {text}")
        self._unchanged(before, "the catch-up was refused")

    def _replay_range(self, which: int, a: float, b: float) -> OffsetRange | None:
        rows = self.rows(self.pipe).coords()
        by_part: dict[int, list[int]] = {}
        for t, p, o in rows:
            if t == self.pipe.topic:
                by_part.setdefault(p, []).append(o)
        if not by_part:
            return None
        p = sorted(by_part)[which % len(by_part)]
        offsets = sorted(by_part[p])
        lo, hi = sorted((round(a * (len(offsets) - 1)), round(b * (len(offsets) - 1))))
        return OffsetRange(self.pipe.topic, p, offsets[lo], offsets[hi] + 1)

    @schedule_step(
        2,
        runners=REPLAYS,
        which=st.integers(0, 100),
        a=st.floats(0, 1),
        b=st.floats(0, 1),
        chunk_size=st.sampled_from([3, 10, 1000]),
    )
    def replay(self, which: int, a: float, b: float, chunk_size: int) -> None:
        """Re-read a committed range (chosen among the rows the sink holds) and replace its rows."""
        self._begin("replay backfill")
        r = self._replay_range(which, a, b)
        if r is None:
            self._outcome("nothing committed yet")
            return
        before = self._settled_footprint()
        request = BackfillRequest(
            self.pipe.name, "replay", (r.partition,), r.start, r.end, chunk_size=chunk_size
        )
        cut = r.start < self.pipe.floor.get(r.partition, 0)
        try:
            chunks = backfill_run.resolve(self.settings, request)
        except BackfillError as exc:
            self._outcome("refused by validation")
            if not (cut and "below the log start" in str(exc)):
                self._violation(f"a replay of committed offsets {r} was refused: {exc}")
            self._unchanged(before, "the replay was refused")
            return
        if cut:
            self._violation(f"a replay of {r}, partly deleted by retention, validated")
        label, _, exc = self._run(
            lambda: backfill_run.run(
                self.settings, request, f"replay-{uuid.uuid4().hex[:8]}", chunks, log=_quiet
            ),
            "a replay",
        )
        self._outcome(f"{label}")
        if label != "committed" and not (label == "fenced" and self.racing):
            self._violation(f"a validated replay of {r} ended {label}: {exc}")
        if _within(self._footprint(), r) != _within(before, r):
            self._violation(f"a replay of {r} changed which records the warehouse holds")

    @schedule_step(
        1,
        heavy=True,
        runners=REPLAYS,
        which=st.integers(0, 100),
        a=st.floats(0, 1),
        b=st.floats(0, 1),
        delay=st.sampled_from([0.0, 3.0, 8.0]),
    )
    def two_replays_at_once(self, which: int, a: float, b: float, delay: float) -> None:
        """The same replay chunk twice at once (a process and in-process run): fenced, never doubled."""
        self._begin("two concurrent replays", heavy=True)
        r = self._replay_range(which, a, b)
        if r is None or r.start < self.pipe.floor.get(r.partition, 0):
            self._outcome("no replayable range")
            return
        before = self._settled_footprint()
        arg = f"{r.topic}:{r.partition}:{r.start}-{r.end}"
        proc = spawn_ingest(
            self.pipe.name,
            self.pipelines_file,
            self.home,
            ["--range", arg, "--mode", "replay", "--run-id", f"ra-{uuid.uuid4().hex[:8]}"],
        )
        time.sleep(delay)
        label, _, exc = self._run(
            lambda: backfill_run.run_chunk(
                self.settings, self.pipe.name, f"rb-{uuid.uuid4().hex[:8]}", r, "replay", log=_quiet
            ),
            "a replay",
        )
        code = proc.wait()
        self._outcome(f"process {EXIT_LABEL.get(code, code)}, in-process {label}")
        labels = {EXIT_LABEL.get(code, f"exit {code}"), label}
        if not labels <= {"committed", "fenced"} or (labels == {"fenced"} and not self.racing):
            self._violation(
                f"two concurrent replays of {r} ended: process {code}, in-process {label} "
                f"{exc}\n{proc.tail(25)}"
            )
        if _within(self._footprint(), r) != _within(before, r):
            self._violation(f"concurrent replays of {r} changed which records the warehouse holds")

    @schedule_step(
        2,
        heavy=True,
        runners=WITHOUT_STREAM,  # a stream would take the chunks' offsets: nothing left to order
        point=st.sampled_from(CHUNK_CRASH_POINTS),
        partition=st.integers(0, MAX_PARTITIONS - 1),
    )
    def catch_up_with_failing_chunk(self, point: str, partition: int) -> None:
        """A catch-up whose first chunk dies (a process, EOSFLOW_CRASH_AT): the next chunk may not commit."""
        self._begin("catch-up with a failing chunk", heavy=True)
        point = self.crash_point(point)
        p = partition % self.partitions
        before = self._settled_footprint()
        try:
            (whole,) = backfill_run.resolve(
                self.settings, BackfillRequest(self.pipe.name, "catch-up", (p,), chunk_size=10**9)
            )
            request = BackfillRequest(self.pipe.name, "catch-up", (p,), chunk_size=max(1, whole.span // 3))
            chunks = backfill_run.resolve(self.settings, request)
        except BackfillError as exc:
            self._refused_backfill(exc, {p}, before)
            return
        if self._must_lose({p}):
            self._violation(
                f"a catch-up over records deleted unread validated: {sorted(self.pipe.lost_pending)[:3]}"
            )
        if len(chunks) < 2:
            self._outcome("a single chunk: nothing to order")
            return
        run_id = f"chunks-{uuid.uuid4().hex[:8]}"
        first = chunks[0]
        proc = spawn_ingest(
            self.pipe.name,
            self.pipelines_file,
            self.home,
            [
                "--range",
                f"{first.topic}:{first.partition}:{first.start}-{first.end}",
                "--mode",
                "catch-up",
                "--run-id",
                run_id,
            ],
            EOSFLOW_CRASH_AT=point,
        )
        code = proc.wait()
        if code != -9 and not (point in SINK_FAULT_POINTS and code == 1):
            self._violation(
                f"chunk {first} with EOSFLOW_CRASH_AT={point} ended {code}, not killed:\n{proc.tail(25)}"
            )
        self._fault(f"chunk SIGKILL at {point}")
        before = self._settled_footprint()
        label, _, exc = self._run(
            lambda: backfill_run.run_chunk(
                self.settings, self.pipe.name, run_id, chunks[1], "catch-up", log=_quiet
            ),
            "the next chunk",
        )
        self._outcome(f"next chunk after a kill at {point}: {label}")
        if point in self.committed_at:
            if label != "committed":
                self._violation(f"the chunk after a committed one ended {label}: {exc}")
        elif label not in ("refused by validation", "fenced"):
            self._violation(f"chunk {chunks[1]} ran although chunk {first} never committed: {label}")
        else:
            self._unchanged(before, f"the chunk after a failed one was {label}")
        # The orchestrator retries the failed chunk (same run id), then the rest run in order.
        for c in chunks:
            label, _, exc = self._run(
                lambda c=c: backfill_run.run_chunk(
                    self.settings, self.pipe.name, run_id, c, "catch-up", log=_quiet
                ),
                "a chunk retry",
            )
            if label not in ("committed", "already committed"):
                self._violation(f"chunk {c} did not commit on its retry: {label}: {exc}")
        self._outcome("every chunk committed after the retry")
        self._caught_up({p})
        self.pipe.ever_committed = True

    @schedule_step(1, case=st.sampled_from(VALIDATION_CASES), partition=st.integers(0, MAX_PARTITIONS - 1))
    def ingest_range_validation(self, case: str, partition: int) -> None:
        """`eosflow ingest --range/--mode` requests that must be refused (exit 2) before any work."""
        self._begin("ingest --range refused")
        p = partition % self.partitions
        start, end = self.kafka.offsets(p)
        t = self.pipe.topic
        argv = {
            "beyond_end": [f"--range={t}:{p}:{end + 1}-{end + 5}", "--mode", "catch-up", "--run-id", "v"],
            "replay_never_committed": [
                f"--range={t}:{p}:{end}-{end + 3}",
                "--mode",
                "replay",
                "--run-id",
                "v",
            ],
            "other_topic": [f"--range=random.nope:{p}:0-1", "--mode", "catch-up", "--run-id", "v"],
            "no_mode": [f"--range={t}:{p}:{start}-{end}", "--run-id", "v"],
            "below_log_start": [
                f"--range={t}:{p}:{max(0, start - 1)}-{start}",
                "--mode",
                "catch-up",
                "--run-id",
                "v",
            ],
            "reversed": [f"--range={t}:{p}:{end + 2}-{end}", "--mode", "catch-up", "--run-id", "v"],
        }[case]
        if case == "below_log_start" and start == 0:
            argv = argv[:0] + [f"--range={t}:{p}:{end + 1}-{end + 2}", "--mode", "replay", "--run-id", "v"]
        before = self._settled_footprint()
        parser = argparse.ArgumentParser()
        ingest_cli.add_arguments(parser)
        try:
            args = parser.parse_args(["--pipeline", self.pipe.name, *argv])
            code = ingest_cli.execute(args, self.settings)
        except SystemExit as exc:  # argparse refusing the range itself
            code = exc.code
        self._outcome(f"{case}: exit {code}")
        if code != 2:
            self._violation(f"eosflow ingest {' '.join(argv)} exited {code}, not 2 (refused)")
        self._unchanged(before, "the range was refused")

    # -- the check after every step ----------------------------------------------------------------
    @invariant()
    def warehouse_matches_model(self) -> None:
        if not self.pipes:
            return
        self._check_current()
        for old in self.pipes[:-1]:
            rows = self.rows(old)
            if old.frozen is not None and rows != old.frozen:
                self._violation(
                    f"pipeline {old.name}, refused since its topic was re-created, changed its rows"
                )
            self._invariants(old)
        self.complete = False
        self.stats.seconds[self._kind] += time.monotonic() - self._step_started

    def _check_current(self) -> None:
        pipe = self.pipe
        rows = self.rows(pipe)
        bad = compare(pipe, rows, self.complete)
        if bad:
            self._violation("the warehouse differs from the producer's model:\n  " + "\n  ".join(bad[:12]))
        pipe.seen |= rows.coords()
        if self.complete:
            self.stats.outcomes["quiescent points checked complete"] += 1
        self._invariants(pipe)

    def _invariants(self, pipe: PipelineModel) -> None:
        try:
            declared = pipelines_mod.load(self.settings, pipe.name, self.pipelines_file)
        except pipelines_mod.PipelineConfigError:
            return
        with psycopg.connect(self.dsn) as conn:
            (exists,) = conn.execute("select to_regclass(%s) is not null", (pipe.table,)).fetchone()
            if not exists:
                return
            found = invariants.check(conn, declared)
        if found:
            self._violation("invariants: " + "; ".join(f"{v.invariant}: {v.detail}" for v in found[:10]))


def _quiet(message: str) -> None:
    pass


def _within(footprint: tuple, r: OffsetRange) -> tuple:
    """A footprint's output and rejected rows inside one range: what a replay of it may not change."""
    inside = lambda k: k[0] == r.topic and k[1] == r.partition and r.start <= k[2] < r.end  # noqa: E731
    return [k for k in footprint[0] if inside(k)], [k for k in footprint[1] if inside(k)]
