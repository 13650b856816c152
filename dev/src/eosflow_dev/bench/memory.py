"""Peak resident memory of a process tree, sampled: the driver and whatever it starts (a Spark JVM)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import psutil

MB = 1024 * 1024


@dataclass(frozen=True)
class PeakRss:
    """Peaks over the samples, in bytes. Each is a peak of its own: they need not be simultaneous."""

    total: int = 0  # the whole tree at one sample
    jvm: int = 0  # the java processes of the tree at one sample (Spark, a Kafka tool)
    samples: int = 0

    @property
    def total_mb(self) -> float:
        return self.total / MB

    @property
    def jvm_mb(self) -> float:
        return self.jvm / MB

    @property
    def other_mb(self) -> float:
        """What is not the JVM (the Python driver): the difference of the two peaks, an estimate."""
        return max(self.total - self.jvm, 0) / MB


def _is_jvm(proc: psutil.Process) -> bool:
    try:
        return proc.name() == "java"
    except psutil.Error:
        return False


def tree_rss(root: psutil.Process) -> tuple[int, int]:
    """(RSS of root and all its descendants, RSS of the java ones among them), now."""
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    total = jvm = 0
    for proc in procs:
        try:
            rss = proc.memory_info().rss
        except psutil.Error:
            continue  # ended between listing and reading: it holds nothing any more
        total += rss
        if _is_jvm(proc):
            jvm += rss
    return total, jvm


class RssSampler:
    """Samples a process tree every `interval_s` on a thread, from start() to stop().

    RSS counts shared pages (libraries) in each process, so the tree's sum is an upper bound; for
    the one or two processes a measurement starts, the difference is small.
    """

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self._root = psutil.Process(pid)
        self._interval = interval_s
        self._stop = threading.Event()
        self._total = self._jvm = self._samples = 0
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self._interval):
                return

    def _sample(self) -> None:
        total, jvm = tree_rss(self._root)
        self._total = max(self._total, total)
        self._jvm = max(self._jvm, jvm)
        self._samples += 1

    def stop(self) -> PeakRss:
        self._stop.set()
        self._thread.join()
        return PeakRss(self._total, self._jvm, self._samples)
