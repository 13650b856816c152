"""Checks for what the stack needs from the machine, each failing with how to get it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from eosflow.errors import StackError

JAVA_MIN = 17
PG_MAJOR = 15


def java() -> str:
    path = shutil.which("java")
    if path is None:
        raise StackError(
            f"Java {JAVA_MIN} is required (Kafka and Spark run on it) and `java` is not on PATH. "
            "On Debian: apt-get install openjdk-17-jdk-headless"
        )
    out = subprocess.run([path, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)', out)
    if not match or int(match.group(1)) < JAVA_MIN:
        said = out.splitlines()[0] if out else "?"
        raise StackError(
            f"Java {JAVA_MIN} or newer is required; `java -version` says: {said}. "
            "Install openjdk-17-jdk-headless and put it first on PATH (or set JAVA_HOME)."
        )
    return path


def maven() -> str:
    path = shutil.which("mvn")
    if path is None:
        raise StackError(
            "Maven is required to fetch the Kafka and Spark connector jars from Maven Central, and `mvn` "
            "is not on PATH. On Debian: apt-get install maven"
        )
    return path


def postgres_bin_dir() -> Path:
    bin_dir = Path(os.environ.get("EOSFLOW_PG_BIN", f"/usr/lib/postgresql/{PG_MAJOR}/bin"))
    missing = [tool for tool in ("initdb", "pg_ctl", "postgres") if not (bin_dir / tool).exists()]
    if missing:
        raise StackError(
            f"PostgreSQL {PG_MAJOR} server binaries not found in {bin_dir} (missing: {', '.join(missing)}). "
            f"On Debian: apt-get install postgresql-{PG_MAJOR}; elsewhere set EOSFLOW_PG_BIN to the folder "
            "that holds initdb and pg_ctl."
        )
    return bin_dir
