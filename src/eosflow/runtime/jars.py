"""Jars from Maven Central, fetched with `mvn` into a git-ignored cache, found from this one place.

Two separate classpaths: the Kafka broker's, and the jars handed to Spark (connector + JDBC driver).
They disagree on Scala and Jackson versions and must never be mixed.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from eosflow.errors import StackError
from eosflow.runtime import prereqs
from eosflow.settings import Settings

CLASSPATHS = ("kafka", "spark", "registry")
# What mvn does with each POM: copy the runtime jars, or (the schema registry, a ready-built app
# published as one archive) unpack it.
_GOALS = {"registry": ["dependency:unpack"]}
_COPY = ["dependency:copy-dependencies", "-DincludeScope=runtime"]


def _pom(settings: Settings, name: str) -> Path:
    return settings.root / "infra" / "maven" / name / "pom.xml"


def _fingerprint(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()[:16]


def folder(settings: Settings, name: str) -> Path:
    return settings.jars_dir / name


def is_fetched(settings: Settings, name: str) -> bool:
    marker = folder(settings, name) / ".fetched"
    return marker.exists() and marker.read_text().strip() == _fingerprint(_pom(settings, name))


def fetch(settings: Settings, name: str, log=print) -> Path:
    """Copy the POM's runtime dependencies into the cache; a no-op when the POM has not changed."""
    target = folder(settings, name)
    if is_fetched(settings, name):
        return target
    pom = _pom(settings, name)
    mvn = prereqs.maven()
    log(f"fetching the {name} jars from Maven Central (once; cached in {target})")
    if name in _GOALS:
        shutil.rmtree(target, ignore_errors=True)  # an unpacked app: nothing of an older one may stay
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.jar"):
        old.unlink()
    cmd = [mvn, "-B", "-q", "-f", str(pom), *_GOALS.get(name, _COPY), f"-DoutputDirectory={target}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        detail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise StackError(
            f"mvn could not fetch the {name} jars (exit {done.returncode}). Check that Maven Central is "
            f"reachable and ~/.m2/settings.xml is sane, then run `eosflow stack fetch` again.\n{detail}"
        )
    (target / ".fetched").write_text(_fingerprint(pom) + "\n")
    return target


def classpath(settings: Settings, name: str) -> str:
    """A java -cp value for one of the cached classpaths."""
    return str(folder(settings, name) / "*")


def spark_jars(settings: Settings) -> list[Path]:
    """The jars to pass to Spark (spark.jars / --jars): the Kafka connector and the JDBC driver."""
    jars = sorted(folder(settings, "spark").glob("*.jar"))
    if not jars:
        raise StackError(
            f"No Spark connector jars in {folder(settings, 'spark')}; run `eosflow stack fetch` first."
        )
    return jars
