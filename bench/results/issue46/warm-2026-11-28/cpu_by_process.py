"""CPU-seconds by kind of process while a measurement runs (issue 46, session 56; README.md).

Samples every process's user + system time from /proc every 0.25 s until SIGTERM or Ctrl-C, then prints
the CPU each kind of process used since it was first seen (a process that starts and ends between two
samples is missed: the runs measured keep their processes). Linux only.

    python cpu_by_process.py > cpu.txt &  # ... run the measurement ...; kill %1
"""

from __future__ import annotations

import collections
import os
import signal
import time

TICK = os.sysconf("SC_CLK_TCK")


def kind(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if "postgres" in cmd and "java" not in cmd:
        return "postgres"
    if "java" in cmd and "spark" in cmd:
        return "spark-jvm"
    if "java" in cmd and "kafka" in cmd:
        return "kafka-jvm"
    if "worker_daemon" in cmd or "spark_connect_driver" in cmd:
        return "spark python workers"
    if "eosflow" in cmd:
        return "eosflow (the run's or the bench's process)"
    return "other"


def cpu(pid: str) -> tuple[float, int] | None:
    """(user + system seconds, start time in ticks: a reused pid is another process)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[19])


def main() -> None:
    seen: dict[tuple[str, int], list] = {}  # (pid, start) -> [first cpu, last cpu, kind]
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    while not stop:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if (now := cpu(pid)) is None:
                continue
            seconds, started = now
            if (pid, started) in seen:
                seen[pid, started][1] = seconds
            else:
                seen[pid, started] = [seconds, seconds, kind(pid)]
        time.sleep(0.25)
    total: collections.Counter[str] = collections.Counter()
    for first, last, what in seen.values():
        total[what or "other"] += last - first
    for what, seconds in total.most_common():
        print(f"{seconds:8.2f} {what}")
    print(f"{sum(total.values()):8.2f} all processes")


if __name__ == "__main__":
    main()
