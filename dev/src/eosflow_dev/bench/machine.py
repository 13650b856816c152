"""What the bench ran on: CPU, memory, load, and the versions of everything measured."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import psycopg

from eosflow_dev.runtime import jars
from eosflow_dev.stack.settings import StackSettings


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    ram_gib: float
    kernel: str
    python: str
    java: str
    kafka: str
    postgres: str
    spark: str

    def describe(self) -> str:
        return (
            f"{self.cpu}, {self.cores} cores, {self.ram_gib:.1f} GiB RAM, Linux {self.kernel}; "
            f"Kafka {self.kafka}, PostgreSQL {self.postgres}, Spark {self.spark} (local[2]), "
            f"Java {self.java}, Python {self.python}"
        )


def load_average() -> tuple[float, float, float]:
    """1, 5 and 15 minute load averages: above the core count means the timings shared the CPU."""
    return os.getloadavg()


def describe(settings: StackSettings) -> Machine:
    return Machine(
        cpu=_cpu_model(),
        cores=os.cpu_count() or 0,
        ram_gib=_mem_total_kib() / 1024 / 1024,
        kernel=platform.release(),
        python=platform.python_version(),
        java=_java_version(),
        kafka=_kafka_version(settings),
        postgres=_postgres_version(settings),
        spark=_package_version("pyspark"),
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _mem_total_kib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    match = re.search(r'version "([^"]+)"', out)
    return match.group(1) if match else "unknown"


def _kafka_version(settings: StackSettings) -> str:
    found = sorted(jars.folder(settings, "kafka").glob("kafka-clients-*.jar"))
    return found[0].stem.removeprefix("kafka-clients-") if found else "unknown"


def _postgres_version(settings: StackSettings) -> str:
    try:
        with psycopg.connect(settings.warehouse_dsn, connect_timeout=10) as conn:
            return str(conn.execute("show server_version").fetchone()[0]).split()[0]
    except psycopg.Error:
        return "unknown"


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"
