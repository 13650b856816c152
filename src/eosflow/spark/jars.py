"""Spark's jars beyond pyspark's own (the Kafka connector with its dependencies, PostgreSQL's JDBC driver):
their lock, which ships in the wheel (jars.lock beside this file), the check every Spark start makes, and
`eosflow jars fetch`, which downloads them from Maven Central or a mirror. DESIGN.md, "Spark's jars in a
deployment".

Downloads use the standard library (urllib): the jars are a fixed list with known digests, so there is no
dependency resolution to do, and a worker image needs neither Maven nor a JVM to fetch them.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from eosflow.errors import StackError
from eosflow.settings import Settings

LOCK = Path(__file__).with_name("jars.lock")
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
FETCH = "eosflow jars fetch"
_SCHEMES = ("https", "http", "file")  # http too: a mirror inside a network; the digest is the trust, not TLS
_GROUP = re.compile(r"[A-Za-z0-9_.-]+")
_PART = re.compile(r"[A-Za-z0-9_.+-]+")
_SHA = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class LockedJar:
    """One jar of the lock: `group:artifact:version` (or `...:version:classifier`) and its SHA-256."""

    sha256: str
    group: str
    artifact: str
    version: str
    classifier: str = ""

    @property
    def coordinates(self) -> str:
        tail = f":{self.classifier}" if self.classifier else ""
        return f"{self.group}:{self.artifact}:{self.version}{tail}"

    @property
    def file(self) -> str:
        """The file name in the folder, Maven's (and `mvn dependency:copy-dependencies`')."""
        tail = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{tail}.jar"

    def url(self, repository: str) -> str:
        """Where a repository in Maven's layout keeps it."""
        path = "/".join([*self.group.split("."), self.artifact, self.version, self.file])
        return f"{repository.rstrip('/')}/{path}"

    def line(self) -> str:
        return f"{self.sha256}  {self.coordinates}  {self.file}"


def parse_line(line: str) -> LockedJar:
    """A lock line: `<sha256>  <group:artifact:version[:classifier]>  <file>`, each part checked, as the
    file name becomes a path and the coordinates a URL."""
    parts = line.split()
    if len(parts) != 3 or not _SHA.fullmatch(parts[0]):
        raise ValueError(f"not a lock line (sha256, coordinates, file): {line!r}")
    sha, coordinates, file = parts
    fields = coordinates.split(":")
    if len(fields) not in (3, 4) or not _GROUP.fullmatch(fields[0]):
        raise ValueError(f"not Maven coordinates (group:artifact:version[:classifier]): {coordinates!r}")
    if not all(_PART.fullmatch(f) for f in fields[1:]):
        raise ValueError(f"not Maven coordinates (group:artifact:version[:classifier]): {coordinates!r}")
    jar = LockedJar(sha, *fields)
    if jar.file != file:
        raise ValueError(f"{file!r} is not the file name of {coordinates} ({jar.file})")
    return jar


def locked(lock: Path | None = None) -> tuple[LockedJar, ...]:
    text = (lock or LOCK).read_text()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return tuple(parse_line(line) for line in lines)


def write_lock(jars: Iterable[LockedJar], lock: Path | None = None) -> None:
    """The lock, sorted by file name, with its header (`eosflow stack fetch --update-lock` in a checkout)."""
    head = [
        "# Spark's jars beyond pyspark's own: SHA-256, Maven coordinates, file name. `eosflow jars fetch`",
        "# downloads them; `eosflow stack fetch --update-lock` (a checkout, after a change to",
        "# infra/maven/spark/pom.xml) rewrites this file from what Maven resolved.",
    ]
    body = [jar.line() for jar in sorted(jars, key=lambda j: j.file)]
    (lock or LOCK).write_text("\n".join(head + body) + "\n")


def folder(settings: Settings) -> Path:
    return settings.jars_dir / "spark"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def problems(target: Path, jars: tuple[LockedJar, ...]) -> list[str]:
    """What differs between the folder and the lock: jars missing, changed or not in the lock."""
    want = {jar.file: jar.sha256 for jar in jars}
    have = {p.name: sha256(p) for p in sorted(target.glob("*.jar"))} if target.is_dir() else {}
    return differences(want, have, "the lock")


def differences(want: Mapping[str, str], have: Mapping[str, str], lock: str) -> list[str]:
    """Each jar (by path) whose SHA-256 in `have` is not the one `want` locks, one line each; `lock` names
    the lock in the lines of jars it does not hold (the stack's sets use it too, eosflow_dev.runtime.jars)."""
    wrong = [
        f"{p}: changed (SHA-256 {have[p]}, locked {want[p]})"
        for p in have
        if p in want and have[p] != want[p]
    ]
    wrong += [f"{p}: not in {lock}" for p in have if p not in want]
    wrong += [f"{p}: missing" for p in want if p not in have]
    return wrong


def listed(lines: list[str], most: int = 10) -> str:
    """The first `most` lines of a refusal's list, indented, and how many more there are."""
    more = f"\n  ... and {len(lines) - most} more" if len(lines) > most else ""
    return "  " + "\n  ".join(lines[:most]) + more


def check(settings: Settings) -> list[Path]:
    """The jars to hand Spark (spark.jars / --jars), refused unless the folder holds exactly the lock's jars
    (about 0.1 s: they are used long after the fetch that checked them)."""
    target = folder(settings)
    jars = locked()
    wrong = problems(target, jars)
    if wrong:
        raise StackError(
            f"Spark's jars in {target} are not the ones eosflow's lock ({LOCK.name}, in the package) "
            f"records; not starting Spark:\n{listed(wrong)}\nRun `{FETCH}` on this machine (or in its "
            f"image's build): it downloads what is missing or changed and removes jars the lock does not "
            f"name. The folder is EOSFLOW_JARS_DIR/spark."
        )
    return [target / jar.file for jar in jars]


@dataclass(frozen=True)
class Fetched:
    folder: Path
    kept: int
    downloaded: int
    removed: int
    bytes: int


def repository_url(raw: str) -> str:
    """The repository to download from: an http(s) or file URL, without a login (none is supported)."""
    parsed = urllib.parse.urlsplit(raw)
    if parsed.scheme not in _SCHEMES:
        raise StackError(
            f"--repository must be an https://, http:// or file:// URL of a repository in Maven's layout; "
            f"got one with scheme {parsed.scheme or '(none)'!r}"
        )
    if parsed.username or parsed.password:
        raise StackError(
            "--repository holds a login, which eosflow does not send and will not print: use a repository "
            "that needs none, or copy a fetched folder to the workers"
        )
    return raw.rstrip("/")


def fetch(
    target: Path,
    repository: str = MAVEN_CENTRAL,
    log: Callable[[str], None] = print,
    jars: tuple[LockedJar, ...] | None = None,
    timeout_s: float = 60,
) -> Fetched:
    """Make `target` hold exactly the lock's jars: keep those that match, download the rest (each under a
    temporary name, renamed only once its SHA-256 matches), remove jars the lock does not name."""
    repository = repository_url(repository)
    jars = locked() if jars is None else jars
    target.mkdir(parents=True, exist_ok=True)
    names = {jar.file for jar in jars}
    removed = 0
    for stray in sorted(target.glob("*.jar")):
        if stray.name not in names:  # an older eosflow's, or a jar put there by hand
            stray.unlink()
            removed += 1
    downloaded = size = 0
    todo = [j for j in jars if not (target / j.file).exists() or sha256(target / j.file) != j.sha256]
    kept = len(jars) - len(todo)
    if todo:
        log(f"fetching {len(todo)} of {len(jars)} Spark jars from {repository} into {target}")
    for jar in todo:
        size += _download(jar, repository, target, timeout_s)
        downloaded += 1
        log(f"  {jar.file}")
    log(f"Spark's jars in {target}: {kept} kept, {downloaded} downloaded, {removed} removed; each as locked")
    return Fetched(target, kept, downloaded, removed, size)


def _download(jar: LockedJar, repository: str, target: Path, timeout_s: float) -> int:
    url = jar.url(repository)
    part = target / f".{jar.file}.{os.getpid()}.part"
    digest = hashlib.sha256()
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response, part.open("wb") as out:  # noqa: S310 (scheme checked)
            for block in iter(lambda: response.read(_CHUNK), b""):
                digest.update(block)
                out.write(block)
                size += len(block)
    except OSError as exc:  # urllib's URLError and HTTPError are OSErrors
        part.unlink(missing_ok=True)
        raise StackError(
            f"could not download {jar.coordinates} from {url}: {exc}. Check the repository "
            "URL and that this machine reaches it, then run the fetch again"
        ) from exc
    if digest.hexdigest() != jar.sha256:
        part.unlink()
        raise StackError(
            f"{jar.file} from {url} is not the jar eosflow's lock records (SHA-256 {digest.hexdigest()}, "
            f"locked {jar.sha256}); removed it, nothing else changed. A mirror serving other bytes under "
            "the same coordinates is misconfigured or tampered with: fetch from Maven Central"
        )
    os.replace(part, target / jar.file)
    return size
