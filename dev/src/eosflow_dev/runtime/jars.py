"""Jars from Maven Central, fetched with `mvn` into a git-ignored cache, found from this one place.

Two separate classpaths: the Kafka broker's, and the jars handed to Spark (connector + JDBC driver).
They disagree on Scala and Jackson versions and must never be mixed.

Trust: mvn runs with --strict-checksums (a download whose checksum does not match fails, where Maven's
default only warns), and every jar's SHA-256 is recorded in infra/jars.sha256 (`sha256sum` format, paths
under the cache folder). The jars are checked against it after each fetch and whenever fetch finds them
already there: a changed, extra or missing jar is refused. After a deliberate change to a POM,
`eosflow stack fetch --update-lock` fetches afresh and rewrites the lock; review its diff before committing.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from eosflow.errors import StackError
from eosflow.spark import jars as spark_jars
from eosflow_dev.runtime import prereqs
from eosflow_dev.stack.settings import StackSettings

CLASSPATHS = ("kafka", "spark", "registry")
# What mvn does with each POM: copy the runtime jars, or (the schema registry, a ready-built app
# published as one archive) unpack it; Kafka Connect both: its worker's jars, and Debezium's plugin
# archive unpacked into a folder of its own (the POM's two executions, by id).
_GOALS = {
    "registry": ["dependency:unpack"],
    "connect": ["dependency:copy-dependencies@worker", "dependency:unpack@debezium"],
}
_COPY = ["dependency:copy-dependencies", "-DincludeScope=runtime"]


LOCK = "infra/jars.sha256"
UPDATE_LOCK = "eosflow stack fetch --update-lock"


def _pom(settings: StackSettings, name: str) -> Path:
    return settings.root / "infra" / "maven" / name / "pom.xml"


def _lock(settings: StackSettings) -> Path:
    return settings.root / LOCK


def _fingerprint(settings: StackSettings, name: str) -> str:
    """The POM and this set's lines of the lock: a change to either fetches the set again."""
    digest = hashlib.sha256(_pom(settings, name).read_bytes())
    for path, sha in sorted(locked(settings, name).items()):
        digest.update(f"{sha}  {path}\n".encode())
    return digest.hexdigest()[:16]


def folder(settings: StackSettings, name: str) -> Path:
    return settings.jars_dir / name


def locked(settings: StackSettings, name: str) -> dict[str, str]:
    """The lock's jars of one set: path under the set's folder -> SHA-256. Spark's set is locked in the
    package (eosflow/spark/jars.lock: an installed eosflow fetches and checks it too), the others here."""
    if name == "spark":
        return {jar.file: jar.sha256 for jar in spark_jars.locked()}
    found = {}
    lock = _lock(settings)
    lines = lock.read_text().splitlines() if lock.exists() else []
    for line in lines:
        if line.strip() and not line.startswith("#"):
            sha, path = line.split("  ", 1)
            if path.startswith(f"{name}/"):
                found[path.removeprefix(f"{name}/")] = sha
    return found


def hashed(settings: StackSettings, name: str) -> dict[str, str]:
    """The jars in one set's folder (and its subfolders): path under the folder -> SHA-256."""
    target = folder(settings, name)
    return {jar.relative_to(target).as_posix(): _sha256(jar) for jar in sorted(target.rglob("*.jar"))}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(settings: StackSettings, name: str) -> None:
    """Refuse the set unless its folder holds exactly the lock's jars, each with the lock's SHA-256."""
    if not _lock(settings).exists():
        raise StackError(
            f"{_lock(settings)} is missing, so the {name} jars in {folder(settings, name)} cannot be "
            "checked; not using them. It comes with eosflow's repository, beside infra/maven/: run eosflow "
            "from the checkout, or set EOSFLOW_HOME to it"
        )
    want, have = locked(settings, name), hashed(settings, name)
    wrong = spark_jars.differences(want, have, LOCK)
    if wrong:
        raise StackError(
            f"the {name} jars in {folder(settings, name)} are not the ones {LOCK} records; not using them:\n"
            f"{spark_jars.listed(wrong)}\n"
            f"If you did not change infra/maven/{name}/pom.xml, something changed the jars (or Maven's "
            f"cache, ~/.m2): remove {folder(settings, name)} and run `eosflow stack fetch`. If you changed "
            f"the POM on purpose, `{UPDATE_LOCK}` fetches afresh and records the new jars: review the diff "
            f"of {LOCK} before committing it."
        )


def is_fetched(settings: StackSettings, name: str) -> bool:
    marker = folder(settings, name) / ".fetched"
    return marker.exists() and marker.read_text().strip() == _fingerprint(settings, name)


def mark_fetched(settings: StackSettings, name: str) -> None:
    (folder(settings, name) / ".fetched").write_text(_fingerprint(settings, name) + "\n")


def mvn_command(settings: StackSettings, name: str, mvn: str, target: Path) -> list[str]:
    """mvn for one POM, with --strict-checksums: a download whose checksum does not match fails."""
    goals = _GOALS.get(name, _COPY)
    return [
        mvn,
        "-B",
        "-q",
        "--strict-checksums",
        "-f",
        str(_pom(settings, name)),
        *goals,
        f"-DoutputDirectory={target}",
    ]


def fetch(settings: StackSettings, name: str, log=print, update_lock: bool = False) -> Path:
    """Copy the POM's runtime dependencies into the cache and check them against the lock; when the
    POM and the lock have not changed, only the check. `update_lock`: fetch afresh, record what came."""
    target = folder(settings, name)
    if is_fetched(settings, name) and not update_lock:
        verify(settings, name)
        return target
    mvn = prereqs.maven()
    log(f"fetching the {name} jars from Maven Central (once; cached in {target})")
    if name in _GOALS:
        shutil.rmtree(target, ignore_errors=True)  # an unpacked app: nothing of an older one may stay
    target.mkdir(parents=True, exist_ok=True)
    (target / ".fetched").unlink(missing_ok=True)
    for old in target.glob("*.jar"):
        old.unlink()
    done = subprocess.run(mvn_command(settings, name, mvn, target), capture_output=True, text=True)
    if done.returncode != 0:
        detail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise StackError(
            f"mvn could not fetch the {name} jars (exit {done.returncode}). Check that Maven Central is "
            f"reachable and ~/.m2/settings.xml is sane, then run `eosflow stack fetch` again.\n{detail}"
        )
    if update_lock and name == "spark":
        spark_jars.write_lock(_resolved(settings, mvn, target))
        log(f"recorded the {len(locked(settings, name))} Spark jars in {spark_jars.LOCK}")
    elif update_lock:
        write_lock(settings, name)
        log(f"recorded the SHA-256 of {len(locked(settings, name))} {name} jars in {_lock(settings)}")
    verify(settings, name)
    mark_fetched(settings, name)
    return target


def _resolved(settings: StackSettings, mvn: str, target: Path) -> list[spark_jars.LockedJar]:
    """The jars mvn just copied into `target`, with the coordinates `mvn dependency:list` names them by."""
    listing = target / ".dependencies.txt"
    cmd = [mvn, "-B", "-q", "-f", str(_pom(settings, "spark")), "dependency:list", "-DincludeScope=runtime",
           f"-DoutputFile={listing}", "-DoutputAbsoluteArtifactFilename=false"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise StackError(f"mvn dependency:list failed (exit {done.returncode}):\n{done.stdout[-2000:]}")
    found = []
    for line in listing.read_text().splitlines():
        # group:artifact:type[:classifier]:version:scope, then mvn's module notes
        fields = line.split(" -- ")[0].strip().split(":")
        if len(fields) in (5, 6) and fields[2] == "jar":
            group, artifact, version = fields[0], fields[1], fields[-2]
            classifier = fields[3] if len(fields) == 6 else ""
            file = spark_jars.LockedJar("", group, artifact, version, classifier).file
            found.append(spark_jars.LockedJar(_sha256(target / file), group, artifact, version, classifier))
    listing.unlink()
    return found


def write_lock(settings: StackSettings, name: str) -> None:
    """Replace one set's lines of the lock with the jars now in its folder; other sets' lines stay."""
    lock = _lock(settings)
    lines = lock.read_text().splitlines() if lock.exists() else []
    head = [line for line in lines if line.startswith("#")] or [_LOCK_HEAD]
    entries = [line for line in lines if line.strip() and not line.startswith("#")]
    entries = [line for line in entries if not line.split("  ", 1)[1].startswith(f"{name}/")]
    entries += [f"{sha}  {name}/{path}" for path, sha in hashed(settings, name).items()]
    entries.sort(key=lambda line: line.split("  ", 1)[1])
    lock.write_text("\n".join(head + entries) + "\n")


_LOCK_HEAD = (
    "# SHA-256 of every jar `eosflow stack fetch` puts in the jar cache (.cache/jars), checked before use.\n"
    f"# Written by `{UPDATE_LOCK}`; `cd .cache/jars && sha256sum -c ../../{LOCK}` checks it by hand."
)


def classpath(settings: StackSettings, name: str) -> str:
    """A java -cp value for one of the cached classpaths."""
    return str(folder(settings, name) / "*")
