"""CPU-seconds by kind of process while a measurement runs (issue 46, session 56; README.md).

Reads every process's CPU from /proc when it starts and again at SIGTERM or Ctrl-C, and prints what each
kind of process used in between. Nothing is read meanwhile, so the run pays nothing for being watched. A
process that ended in between is counted through its parent, whose `cutime`/`cstime` hold the children it
reaped (Postgres' backends through the postmaster, the loop and the run's CLI through the bench). One whose
parent ignores SIGCHLD is not counted: Spark's worker daemon does, but the server keeps its workers between
runs, so they are read directly. The window is wider than the run: it ends with the bench's own checks of
the table (a digest of its rows). Linux only.

    python cpu_by_process.py > cpu.txt &  # ... run the measurement ...; kill %1
"""

from __future__ import annotations

import collections
import os
import signal

TICK = os.sysconf("SC_CLK_TCK")


def kind(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "postgres" in cmd and "java" not in cmd:
        return "postgres"
    if "java" in cmd and "spark" in cmd:
        return "spark-jvm"
    if "java" in cmd and "kafka" in cmd:
        return "kafka-jvm"
    if "worker_daemon" in cmd or "spark_connect_driver" in cmd:
        return "spark python workers"
    if "eosflow" in cmd:
        return "eosflow (the run's or the bench's process, and the loop)"
    return "other"


Reading = dict[tuple[str, int], tuple[float, float, str, str]]  # (pid, start) -> own, children, ppid, kind


def read() -> Reading:
    out: Reading = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        own = (int(fields[11]) + int(fields[12])) / TICK
        children = (int(fields[13]) + int(fields[14])) / TICK
        out[pid, int(fields[19])] = (own, children, fields[1], kind(pid))
    return out


def used(before: Reading, after: Reading) -> collections.Counter[str]:
    total: collections.Counter[str] = collections.Counter()
    for key, (own, children, _, what) in after.items():
        own0, children0, _, _ = before.get(key, (0.0, 0.0, "", what))
        total[what] += own + children - own0 - children0
    # Ended in between: its parent's reaped time holds all of it, of which the first reading had seen some.
    # A parent that ignores SIGCHLD (Spark's worker daemon) reaps without adding: its grown `cutime` says so.
    alive = {pid for pid, _ in after}
    for (pid, _), (own0, children0, ppid, _) in before.items():
        if pid in alive:
            continue
        for key, (_, children, _, parent) in after.items():
            if key[0] == ppid and children - before.get(key, (0.0, 0.0, "", ""))[1] >= own0 + children0:
                total[parent] -= own0 + children0
    return total


def main() -> None:
    before = read()
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    signal.pause()
    total = used(before, read())
    for what, seconds in total.most_common():
        print(f"{seconds:8.2f} {what}")
    print(f"{sum(total.values()):8.2f} all processes")


if __name__ == "__main__":
    main()
