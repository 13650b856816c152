"""Crash injection: a real SIGKILL of the running job at a named step boundary.

Set EOSFLOW_CRASH_AT to one of CRASH_POINTS and the job kills itself there, with no cleanup,
exactly as an OOM kill or a lost machine would. Tests and the delivery lab share this.
"""

from __future__ import annotations

import os
import signal
import sys

CRASH_POINTS = ("after_plan", "after_read", "after_stage", "in_commit", "after_commit")


def crash_point(name: str) -> None:
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}")
    if os.environ.get("EOSFLOW_CRASH_AT") == name:
        print(f"eosflow: fault injection: SIGKILL at {name}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
