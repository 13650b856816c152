"""Refuse to start Spark on a mixed pyspark: Python files of one version over the jars of another.

The Spark provider (apache-airflow-providers-apache-spark) requires pyspark-client, which installs into the
same `pyspark/` folder as pyspark and overwrites its Python files, not its jars: `pyspark.__version__` then
names the client's version while the JVM runs pyspark's. Spark's Python and JVM halves talk through py4j
with no version handshake, so such a mix fails, if at all, far from its cause.
"""

from __future__ import annotations

import re
from pathlib import Path

from eosflow.errors import StackError

_PY_VERSION = re.compile(r"""^__version__(?:\s*:\s*str)?\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)
_CORE_JAR = re.compile(r"^spark-core_[\d.]+-(.+)\.jar$")


class MixedPysparkError(StackError):
    """pyspark's Python files and its jars are of different versions; the message names both and the fix."""


def installed(folder: Path) -> tuple[str | None, str | None]:
    """(the version of pyspark's Python files, the version of the jars beside them) in a pyspark folder;
    None where there is none to read (a pyspark from a Spark distribution has no jars/ of its own)."""
    version_file = folder / "version.py"
    found = _PY_VERSION.search(version_file.read_text()) if version_file.exists() else None
    cores = sorted((folder / "jars").glob("spark-core_*.jar"))
    jars = [m.group(1) for p in cores if (m := _CORE_JAR.match(p.name))]
    return (found.group(1) if found else None), (jars[0] if len(jars) == 1 else None)


def check(folder: Path | None = None) -> None:
    """Raise MixedPysparkError when the pyspark in `folder` (the importable one) runs one version's Python
    over another's jars; nothing to compare (no jars/, or no version file) passes."""
    if folder is None:
        import pyspark

        folder = Path(pyspark.__file__).parent
    python, jvm = installed(folder)
    if python is None or jvm is None or python == jvm:
        return
    raise MixedPysparkError(
        f"pyspark in {folder} is mixed: its Python files are {python}, its jars (the JVM Spark would run) "
        f"{jvm}; not starting Spark on it. The Spark provider's pyspark-client installs into the same folder "
        f"and overwrites pyspark's Python files. Put pyspark back after installing the provider: "
        f"pip install --force-reinstall --no-deps pyspark=={jvm}"
    )
