"""Fault injection inside the job: a real SIGKILL, or a pause, at a named step boundary.

- EOSFLOW_CRASH_AT=<point>: the job kills itself there with no cleanup, exactly as an OOM kill
  or a lost machine would.
- EOSFLOW_PAUSE_AT=<point> with EOSFLOW_FAULT_DIR=<dir>: the job writes `<dir>/<point>.paused`
  and waits until `<dir>/<point>.resume` exists. The lab uses the pause to do something real
  while the job stands exactly there: restart the broker or Postgres, or let a newer run commit
  first (a zombie).

Points, in run order: after_plan, before_read (Spark session up, nothing read yet), after_read,
after_stage, in_commit (inside the commit transaction; in the two-transaction delivery modes,
between the two; for a Kafka sink, after the Kafka transactions committed and before the ledger
mirrors them), after_commit. The job reads, checks and stages in one Spark pass, so after_read
and after_stage both come right after it (the batch staged, its read checked against the plan):
a crash leaves the same state at either. A Kafka sink reads and produces in one pass with no
staging: after_read and after_stage do not occur in its runs, and its Spark tasks have
in_kafka_transaction (the range's records produced, its transaction open). The tests and
`eosflow lab` share these.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

FAULT_POINTS = (
    "after_plan",
    "before_read",
    "after_read",
    "after_stage",
    "in_commit",
    "after_commit",
    # eosflow publish, per batch: before its rows are read, inside its open Kafka transaction (rows
    # and position produced), after its commit.
    "publish_before_batch",
    "publish_in_transaction",
    "publish_after_commit",
    # eosflow compact and a stream's merges, per merge: the merged child built, its swap for the old
    # children not yet begun (commits of the partition go on; a replay now makes the merge give up).
    "compact_copied",
)
PAUSE_TIMEOUT_S = 900.0


# Inside a sink's Spark task: a SIGKILL there kills the Python worker in the middle of its work
# (the Kafka sink: the range's records produced, its transaction still open; the Iceberg sink: its
# Parquet files written into their streams, the uploads not completed), and the job fails.
SINK_FAULT_POINTS = ("in_kafka_transaction", "in_file_upload")


def fault_point(name: str) -> None:
    if name not in FAULT_POINTS + SINK_FAULT_POINTS:
        raise ValueError(f"unknown fault point {name!r}")
    if os.environ.get("EOSFLOW_CRASH_AT") == name:
        print(f"eosflow: fault injection: SIGKILL at {name} (pid {os.getpid()})", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("EOSFLOW_PAUSE_AT") == name:
        _pause(name)


def _pause(name: str) -> None:
    folder = os.environ.get("EOSFLOW_FAULT_DIR")
    if not folder:
        raise RuntimeError("EOSFLOW_PAUSE_AT needs EOSFLOW_FAULT_DIR: the folder the pause handshake uses")
    paused, resume = Path(folder) / f"{name}.paused", Path(folder) / f"{name}.resume"
    paused.write_text(f"{os.getpid()}\n")
    print(f"eosflow: fault injection: paused at {name} until {resume} exists", file=sys.stderr, flush=True)
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    while not resume.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"paused at {name} for {PAUSE_TIMEOUT_S:.0f}s and nobody resumed the run")
        time.sleep(0.05)
    print(f"eosflow: fault injection: resumed at {name}", file=sys.stderr, flush=True)
