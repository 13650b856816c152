"""`make soak`: the randomized schedules for 1,000+ steps per runner on a stack of its own, then reports.

    python -m tests.random.soak            # EOSFLOW_SOAK_STEPS (1000 per runner), EOSFLOW_SOAK_SEED (random),
                                           # EOSFLOW_SOAK_RUNNERS (batch,kafka,publisher,stream,
                                           # iceberg,changes)

The stack lives under .stack/soak on ports of its own (Kafka 19292/19293, Postgres 15632, Kafka Connect
19283), started with `eosflow stack up` (`--with connect` when the changes runner is asked for: its
Postgres runs with wal_level = logical, as every stack's) and stopped with `eosflow stack down` at the
end (EOSFLOW_SOAK_KEEP_STACK=1 keeps it). Machines run one after another, each a fresh pipeline, until
the steps are done; a violation ends its machine (no shrinking: the machine's own step list is in the
report) and the soak goes on with the next. Each runner's report goes to soak/results/<runner>.md and
.json, and soak/results/latest.md sums them up.
"""

from __future__ import annotations

import json
import os
import platform
import random
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOAK_ENV = {
    "EOSFLOW_STATE_DIR": str(ROOT / ".stack" / "soak"),
    "EOSFLOW_KAFKA_PORT": "19292",
    "EOSFLOW_KAFKA_CONTROLLER_PORT": "19293",
    "EOSFLOW_KAFKA_SASL_PORT": "0",  # the dev stack's SASL port stays the dev stack's
    "EOSFLOW_PG_PORT": "15632",
    "EOSFLOW_CONNECT_PORT": "19283",  # the changes runner's Connect worker, beside the dev stack's
    "EOSFLOW_REGISTRY_PORT": "0",  # no schema registry: the soak's pipelines are JSON
}
RESULTS = ROOT / "soak" / "results"
RUNNERS = ("batch", "kafka", "publisher", "stream", "iceberg", "changes")


def _eosflow(*args: str) -> None:
    subprocess.run([str(Path(sys.executable).parent / "eosflow"), *args], check=True, env=os.environ)


def machine_class(runner: str) -> type:
    from tests.random.change_stream import ChangeStreamMachine
    from tests.random.iceberg_sink import IcebergSinkMachine
    from tests.random.kafka_sink import KafkaSinkMachine
    from tests.random.machine import ScheduleMachine
    from tests.random.publisher import PublisherMachine
    from tests.random.stream import StreamMachine

    base = {
        "batch": ScheduleMachine,
        "kafka": KafkaSinkMachine,
        "publisher": PublisherMachine,
        "stream": StreamMachine,
        "iceberg": IcebergSinkMachine,
        "changes": ChangeStreamMachine,
    }[runner]

    class Machine(base):
        slow_faults = True  # the soak's stack is its own: its broker may be paused

    return Machine


def main() -> int:
    target = int(os.environ.get("EOSFLOW_SOAK_STEPS", "1000"))
    chosen = int(os.environ.get("EOSFLOW_SOAK_SEED") or random.SystemRandom().randrange(2**32))
    heavy_gap = int(os.environ.get("EOSFLOW_SOAK_HEAVY_GAP", "5"))
    runners = [r for r in os.environ.get("EOSFLOW_SOAK_RUNNERS", ",".join(RUNNERS)).split(",") if r]
    unknown = sorted(set(runners) - set(RUNNERS))
    if unknown:
        print(f"soak: unknown runner(s) {unknown} in EOSFLOW_SOAK_RUNNERS; choose among {list(RUNNERS)}")
        return 2
    os.environ.update(SOAK_ENV)
    for name in ("AIRFLOW_CONN_WAREHOUSE", "AIRFLOW_CONN_KAFKA_DEFAULT"):
        os.environ.pop(name, None)

    from eosflow_dev.stack import settings as settings_mod

    print(
        f"soak: seed {chosen}, {target} steps for each of {', '.join(runners)}, stack under "
        f"{SOAK_ENV['EOSFLOW_STATE_DIR']}",
        flush=True,
    )
    # Kafka Connect with Debezium only for the change streams' runner (its jars are fetched the first time).
    _eosflow("stack", "up", *(["--with", "connect"] if "changes" in runners else []))
    violations = 0
    try:
        for runner in runners:
            machine = machine_class(runner)
            machine.settings = settings_mod.load()
            machine.workdir = Path(SOAK_ENV["EOSFLOW_STATE_DIR"]) / "random"
            machine.heavy_gap = heavy_gap
            machine.trace = bool(os.environ.get("EOSFLOW_RANDOM_TRACE"))
            violations += soak_one(runner, machine, chosen, target, heavy_gap)
    finally:
        write_summary(runners)
        if not os.environ.get("EOSFLOW_SOAK_KEEP_STACK"):
            _eosflow("stack", "down")
    return 1 if violations else 0


def soak_one(runner: str, machine: type, chosen: int, target: int, heavy_gap: int) -> int:
    """Rounds of `machine` until `target` steps: its report written; returns its violations."""
    from hypothesis import HealthCheck, Phase, seed, settings
    from hypothesis.stateful import run_state_machine_as_test

    from tests.random.machine import Stats

    stats = machine.stats = Stats()
    started = time.monotonic()
    failures: list[str] = []
    rounds = 0
    try:
        while stats.total_steps < target and len(stats.violations) < 25:
            before = len(stats.violations)
            try:
                run_state_machine_as_test(
                    seed(chosen + rounds)(machine),
                    settings=settings(
                        max_examples=4,
                        stateful_step_count=50,
                        deadline=None,
                        database=None,
                        suppress_health_check=list(HealthCheck),
                        phases=[Phase.generate],
                    ),
                )
            except Exception as exc:  # noqa: BLE001 - recorded, and the soak goes on
                if len(stats.violations) == before:
                    # The exception's own words first: Hypothesis' report of the steps can fill the tail.
                    stats.violations.append(
                        f"round {rounds} (seed {chosen + rounds}): {type(exc).__name__}: {str(exc)[:1500]}\n"
                        + "".join(traceback.format_exception(exc))[-3000:]
                    )
                failures.append(f"round {rounds}, seed {chosen + rounds}")
            rounds += 1
            for v in stats.violations[before:]:  # as it happens, not only in the report at the end
                print(f"soak {runner}: VIOLATION {v[:2000]}", flush=True)
            print(
                f"soak {runner}: round {rounds} done, {stats.total_steps}/{target} steps, "
                f"{len(stats.violations)} violation(s), {time.monotonic() - started:.0f} s",
                flush=True,
            )
    finally:
        wall = time.monotonic() - started
        write_report(runner, stats, chosen, target, wall, rounds, heavy_gap, failures)
    return len(stats.violations)


def write_summary(runners: list[str]) -> None:
    """soak/results/latest.md: one line per runner, from the reports on disk (a runner not run this
    time keeps its last report, and says when it was)."""
    lines = [
        "# Randomized schedule soak: latest reports",
        "",
        "| runner | date | seed | steps | faults injected | violations | wall (min) | report |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for runner in RUNNERS:
        path = RESULTS / f"{runner}.json"
        if not path.exists():
            lines.append(f"| {runner} | never run | | | | | | |")
            continue
        r = json.loads(path.read_text())
        lines.append(
            f"| {runner} | {r['date']} | {r['seed']} | {r['steps']} | {sum(r['faults'].values())} | "
            f"{len(r['violations'])} | {r['wall_seconds'] / 60:.1f} | [{runner}.md]({runner}.md) |"
        )
    lines += ["", f"This run: {', '.join(runners)}. `make soak` runs every runner; see ../README.md.", ""]
    (RESULTS / "latest.md").write_text("\n".join(lines))


def write_report(
    runner: str, stats, chosen: int, target: int, wall: float, rounds: int, heavy_gap: int, failures
) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    py = platform.python_version()
    machine = f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores, Python {py})"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = {
        "runner": runner,
        "date": when,
        "machine": machine,
        "seed": chosen,
        "steps_requested": target,
        "steps": stats.total_steps,
        "machines": stats.machines,
        "rounds": rounds,
        "heavy_gap": heavy_gap,
        "wall_seconds": round(wall, 1),
        "steps_by_kind": dict(stats.steps.most_common()),
        "seconds_by_kind": {k: round(v, 1) for k, v in stats.seconds.most_common()},
        "faults": dict(stats.faults.most_common()),
        "outcomes": dict(sorted(stats.outcomes.items())),
        "violations": stats.violations,
        "failed_rounds": failures,
    }
    (RESULTS / f"{runner}.json").write_text(json.dumps(body, indent=2) + "\n")
    lines = [
        f"# Randomized schedule soak: {runner}",
        "",
        f"`make soak` on {when}, {machine}.",
        "",
        f"- seed **{chosen}**, {stats.total_steps} steps ({target} requested) in {stats.machines} machines "
        f"(fresh pipelines), {rounds} Hypothesis rounds, wall time **{wall / 60:.1f} min** "
        f"({wall / max(stats.total_steps, 1):.2f} s per step)",
        f"- at most one process-based step every {heavy_gap} steps",
        f"- violations: **{len(stats.violations)}**",
        "",
        "## Steps",
        "",
        "| kind | steps | seconds | s/step |",
        "|---|---:|---:|---:|",
    ]
    for kind, n in stats.steps.most_common():
        secs = stats.seconds.get(kind, 0.0)
        lines.append(f"| {kind} | {n} | {secs:.0f} | {secs / n:.2f} |")
    lines += ["", "## Faults injected", "", "| fault | count |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in stats.faults.most_common()]
    lines += ["", "## Outcomes", "", "| step: outcome | count |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(stats.outcomes.items())]
    lines += ["", "## Violations", ""]
    if stats.violations:
        for v in stats.violations:
            lines += ["```", v.strip(), "```", ""]
    else:
        lines += [
            "None: after every step the sink matched the model built from the producer's side (the "
            "outbox's, for the publisher), and the invariants held.",
            "",
        ]
    lines += [
        "## Reproducing",
        "",
        "```bash",
        f"EOSFLOW_SOAK_SEED={chosen} EOSFLOW_SOAK_STEPS={target} EOSFLOW_SOAK_HEAVY_GAP={heavy_gap} \\",
        f"  EOSFLOW_SOAK_RUNNERS={runner} make soak",
        "```",
        "",
        "The seed fixes every step Hypothesis draws (round r uses seed + r); the real world's timing",
        "(how far a killed process got, which of two concurrent runs commits) is not fixed by it, so a",
        "replay takes the same steps but may see other outcomes. Each violation lists its machine's steps.",
        "",
    ]
    (RESULTS / f"{runner}.md").write_text("\n".join(lines))
    print(f"soak: report in {RESULTS / f'{runner}.md'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
