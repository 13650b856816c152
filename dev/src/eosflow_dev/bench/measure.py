"""Run one measurement's command as a process of its own: wall time, peak RSS, output, a heartbeat.

Every measurement runs in a fresh process so its memory is its own and nothing is warm from
the previous one. Workers written for the bench print their own timings as one last stdout line,
`BENCH_RESULT <json>`, which `worker_result` reads back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eosflow_dev.bench.memory import PeakRss, RssSampler

RESULT_PREFIX = "BENCH_RESULT "
Log = Callable[[str], None]


class MeasurementFailed(RuntimeError):
    """A measured command failed; the message names it and shows the end of its log."""


@dataclass(frozen=True)
class Measured:
    wall_s: float
    rss: PeakRss
    stdout: str
    log_path: Path


def run_measured(
    name: str,
    cmd: Sequence[str],
    log_path: Path,
    log: Log,
    env: dict[str, str] | None = None,
    heartbeat_s: float = 30.0,
    timeout_s: float = 3600.0,
) -> Measured:
    """Run `cmd`, sampling its process tree's RSS; stderr goes to `log_path`, stdout is returned."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as err:
        err.write("$ " + " ".join(cmd) + "\n")
        err.flush()
        started = time.monotonic()
        # A session of its own: on a timeout or Ctrl-C the whole tree goes, Spark's JVM included.
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, start_new_session=True
        )
        sampler = RssSampler(proc.pid).start()
        done = threading.Event()

        def beat() -> None:
            while not done.wait(heartbeat_s):
                log(f"  {name}: still running, {time.monotonic() - started:.0f} s")

        threading.Thread(target=beat, daemon=True).start()
        try:
            stdout, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            raise MeasurementFailed(
                f"{name} did not finish within {timeout_s:.0f} s; log: {log_path}"
            ) from None
        except BaseException:  # Ctrl-C, or anything else: leave nothing running behind us
            _kill_tree(proc)
            raise
        finally:
            wall = time.monotonic() - started
            done.set()
            rss = sampler.stop()
    if proc.returncode != 0:
        raise MeasurementFailed(
            f"{name} failed (exit {proc.returncode}); last lines of {log_path}:\n{tail(log_path)}"
        )
    return Measured(wall, rss, stdout, log_path)


def _kill_tree(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the group is exactly its tree
    proc.communicate()


def worker_result(measured: Measured, name: str) -> dict[str, Any]:
    """The JSON a bench worker printed last on stdout."""
    for line in reversed(measured.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise MeasurementFailed(f"{name} printed no {RESULT_PREFIX.strip()} line; see {measured.log_path}")


def emit_result(body: dict[str, Any]) -> None:
    """For workers: hand the harness their timings and counts."""
    print(RESULT_PREFIX + json.dumps(body), flush=True)


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
