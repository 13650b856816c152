"""`eosflow lab`: real faults x delivery modes x trials, reported as Markdown and CSV.

The lab starts a stack of its own (see eosflow_dev.lab.world) and leaves it running for a next run
unless --down is given, which stops it when the lab is done.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from eosflow_dev.lab import report, runner
from eosflow_dev.lab.world import LAB_MODES, Lab, lab_settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    keys = [s.key for s in runner.SCENARIOS]
    p.add_argument(
        "--scenarios",
        type=lambda t: [k.strip() for k in t.split(",") if k.strip()],
        default=None,
        help=f"comma-separated, from: {', '.join(keys)} (default: all)",
    )
    p.add_argument(
        "--modes",
        type=lambda t: [m.strip() for m in t.split(",") if m.strip()],
        default=None,
        help=f"consumer delivery modes, from: {', '.join(LAB_MODES)} (default: each scenario's)",
    )
    p.add_argument("--trials", type=int, default=1, help="repetitions of every scenario x mode (default 1)")
    p.add_argument("--records", type=int, default=600, help="records produced per trial (default 600)")
    p.add_argument("--seed", type=int, default=42, help="seeds the events and the aborted transactions")
    p.add_argument("--small", action="store_true", help="the CI-sized lab: fewer boundaries and modes")
    p.add_argument("--out", type=Path, default=None, help="report folder (default: <project>/lab/results)")
    p.add_argument("--down", action="store_true", help="stop the lab's stack when done")


def execute(args: argparse.Namespace) -> int:
    from eosflow_dev import stack

    unknown = set(args.scenarios or ()) - set(runner.by_key())
    bad_modes = set(args.modes or ()) - set(LAB_MODES)
    if unknown or bad_modes or args.trials < 1 or args.records < 1:
        print(
            f"eosflow lab: unknown scenarios {sorted(unknown)} or modes {sorted(bad_modes)}, or a count < 1. "
            f"Scenarios: {', '.join(runner.by_key())}; modes: {', '.join(LAB_MODES)}.",
            file=sys.stderr,
        )
        return 2
    settings = lab_settings()
    todo = runner.plan(args.scenarios, args.modes, args.trials, args.small)
    cells = sum(len(c) for _, c in todo)
    log = _log
    log(f"lab: {cells} trial(s) in {len(todo)} scenario(s), {args.records} records each, seed {args.seed}")
    log(f"lab stack: kafka {settings.bootstrap_servers}, postgres {settings.pg_port}, {settings.state_dir}")
    stack.up(settings, log=log)
    started = time.monotonic()
    home = settings.state_dir / "runs" / datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    lab = Lab(settings, home, args.seed, args.records, log=log)
    try:
        trials, errors = runner.run(lab, todo)
    finally:
        if args.down:
            stack.down(settings, log=log)
    out = args.out or settings.root / "lab" / "results"
    command = "eosflow lab " + shlex.join(sys.argv[2:]) if len(sys.argv) > 2 else "eosflow lab"
    header = (
        f"# eosflow delivery lab\n\n`{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()} ({platform.machine()}), {args.records} records per trial, seed {args.seed}, "
        f"{time.monotonic() - started:.0f} s."
    )
    md, table_csv = report.write(trials, out, header)
    if args.out is None and not (args.small or args.scenarios or args.modes or errors):
        # A full run into the default folder is the one the docs' lab page shows.
        line = header.split("\n", 2)[2]
        if report.update_readme(settings.root / "docs" / "development" / "lab.md", trials, line):
            log("docs/development/lab.md: the lab table is updated")
    print(report.text_table(trials))
    log(f"report: {md} and {table_csv}")
    for error in errors:
        log(f"ERROR: scenario {error}")
    injected = sum(t.faults for t in trials)
    missing = [t for t in trials if t.faults == 0]
    log(f"{injected} fault(s) injected and observed over {len(trials)} trial(s)")
    if missing:
        log("WARNING: no fault was observed in: " + "; ".join(f"{t.scenario}/{t.mode}" for t in missing))
    return 1 if missing or errors else 0


def _log(msg: str) -> None:
    print(f"[lab {datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)
