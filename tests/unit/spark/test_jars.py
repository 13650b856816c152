"""Spark's jars beyond pyspark's own: the lock in the package, `eosflow jars fetch` from a repository in
Maven's layout (a file:// one here, real files, real downloads through urllib) and the check every Spark
start makes. DESIGN.md, "Spark's jars in a deployment"."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from eosflow import settings as settings_mod
from eosflow.errors import StackError
from eosflow.spark import jars

REAL = settings_mod.load()


def _jar(group: str, artifact: str, version: str, body: bytes) -> jars.LockedJar:
    return jars.LockedJar(hashlib.sha256(body).hexdigest(), group, artifact, version)


A = (b"PK a", "org.example", "a-core_2.13", "1.0")
B = (b"PK b", "com.example.tools", "b", "2.0.1")


@pytest.fixture
def repository(tmp_path) -> tuple[str, tuple[jars.LockedJar, ...]]:
    """A repository in Maven's layout on disk holding two jars, and a lock naming them."""
    locked = []
    for body, group, artifact, version in (A, B):
        jar = _jar(group, artifact, version, body)
        path = tmp_path / "repo" / Path(*group.split(".")) / artifact / version / jar.file
        path.parent.mkdir(parents=True)
        path.write_bytes(body)
        locked.append(jar)
    return (tmp_path / "repo").as_uri(), tuple(locked)


def _fetch(target: Path, repo: str, locked: tuple[jars.LockedJar, ...]) -> jars.Fetched:
    return jars.fetch(target, repo, log=lambda _: None, jars=locked)


# -- the lock in the package ---------------------------------------------------------------------------
def test_the_packaged_lock_names_each_jar_once_by_coordinates_and_file() -> None:
    locked = jars.locked()
    assert len({j.file for j in locked}) == len(locked) >= 10
    assert {j.artifact for j in locked} >= {"spark-sql-kafka-0-10_2.13", "kafka-clients", "postgresql"}
    assert jars.LOCK.read_text().splitlines()[len(jars.LOCK.read_text().splitlines()) - len(locked) :] == [
        j.line() for j in sorted(locked, key=lambda j: j.file)
    ]


def test_the_lock_holds_the_connector_the_pom_names() -> None:
    """The lock holds the Kafka connector of the Spark version the POM names (changed together)."""
    pom = (REAL.root / "infra" / "maven" / "spark" / "pom.xml").read_text()
    connector = next(j for j in jars.locked() if j.artifact == "spark-sql-kafka-0-10_2.13")
    assert f"<spark.version>{connector.version}</spark.version>" in pom


def test_a_url_follows_mavens_layout() -> None:
    jar = jars.LockedJar("0" * 64, "org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0")
    assert jar.url("https://repo1.maven.org/maven2/") == (
        "https://repo1.maven.org/maven2/org/apache/spark/spark-sql-kafka-0-10_2.13/4.2.0/"
        "spark-sql-kafka-0-10_2.13-4.2.0.jar"
    )
    assert dataclasses.replace(jar, classifier="tests").file == "spark-sql-kafka-0-10_2.13-4.2.0-tests.jar"


@pytest.mark.parametrize(
    "line",
    [
        f"{'0' * 64}  org.x:a:1.0  ../a-1.0.jar",  # a file name that would leave the folder
        f"{'0' * 64}  org.x:../a:1.0  ../a-1.0.jar",
        f"{'0' * 64}  org/x:a:1.0  a-1.0.jar",
        f"{'0' * 64}  org.x:a  a.jar",
        f"{'0' * 63}  org.x:a:1.0  a-1.0.jar",
        f"{'0' * 64}  org.x:a:1.0  b-1.0.jar",  # not the coordinates' file
    ],
)
def test_a_lock_line_that_is_not_sha_coordinates_and_their_file_is_refused(line) -> None:
    with pytest.raises(ValueError):
        jars.parse_line(line)


# -- eosflow jars fetch --------------------------------------------------------------------------------
def test_fetch_downloads_each_locked_jar_then_keeps_what_matches(tmp_path, repository) -> None:
    repo, locked = repository
    target = tmp_path / "jars" / "spark"
    first = _fetch(target, repo, locked)
    assert (first.downloaded, first.kept, first.removed) == (2, 0, 0)
    assert sorted(p.name for p in target.iterdir()) == ["a-core_2.13-1.0.jar", "b-2.0.1.jar"]
    assert (target / "b-2.0.1.jar").read_bytes() == b"PK b"
    again = _fetch(target, repo, locked)
    assert (again.downloaded, again.kept) == (0, 2)


def test_fetch_replaces_a_changed_jar_and_removes_one_the_lock_does_not_name(tmp_path, repository) -> None:
    repo, locked = repository
    target = tmp_path / "spark"
    _fetch(target, repo, locked)
    (target / "b-2.0.1.jar").write_bytes(b"PK evil")
    (target / "old-0.9.jar").write_bytes(b"PK an older eosflow's")
    done = _fetch(target, repo, locked)
    assert (done.downloaded, done.kept, done.removed) == (1, 1, 1)
    assert (target / "b-2.0.1.jar").read_bytes() == b"PK b" and not (target / "old-0.9.jar").exists()


def test_a_download_that_is_not_the_locked_jar_is_refused_and_leaves_nothing(tmp_path, repository) -> None:
    repo, locked = repository
    served = next((tmp_path / "repo").rglob("b-2.0.1.jar"))
    served.write_bytes(b"PK served by a tampered mirror")
    target = tmp_path / "spark"
    with pytest.raises(StackError, match=r"b-2\.0\.1\.jar from .* is not the jar eosflow's lock records"):
        _fetch(target, repo, locked)
    assert sorted(p.name for p in target.iterdir()) == ["a-core_2.13-1.0.jar"]  # no part file, no b


def test_a_jar_the_repository_does_not_have_names_the_coordinates(tmp_path, repository) -> None:
    repo, locked = repository
    missing = _jar("org.example", "gone", "3.0", b"PK gone")
    with pytest.raises(StackError, match=r"could not download org\.example:gone:3\.0 from .*gone-3\.0\.jar"):
        _fetch(tmp_path / "spark", repo, (*locked, missing))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://mirror.example/maven2", "scheme 'ftp'"),
        ("mirror.example/maven2", r"scheme '\(none\)'"),
        ("https://user:s3cret@mirror.example/maven2", "holds a login"),
    ],
)
def test_a_repository_url_eosflow_will_not_use_is_refused_before_anything_is_written(
    tmp_path, url, message
) -> None:
    with pytest.raises(StackError, match=message) as refused:
        jars.fetch(tmp_path / "spark", url, log=lambda _: None)
    assert "s3cret" not in str(refused.value)
    assert not (tmp_path / "spark").exists()


# -- the check every Spark start makes -------------------------------------------------------------------
def test_spark_is_handed_exactly_the_locked_jars_and_refused_anything_else(tmp_path, monkeypatch) -> None:
    lock = tmp_path / "jars.lock"
    jars.write_lock([_jar("org.example", "a", "1.0", b"PK a")], lock)
    monkeypatch.setattr(jars, "LOCK", lock)
    settings = dataclasses.replace(REAL, jars_dir=tmp_path / "cache")
    with pytest.raises(StackError, match=r"(?s)a-1\.0\.jar: missing.*Run `eosflow jars fetch`"):
        jars.check(settings)
    jars.folder(settings).mkdir(parents=True)
    (jars.folder(settings) / "a-1.0.jar").write_bytes(b"PK a")
    assert jars.check(settings) == [jars.folder(settings) / "a-1.0.jar"]
    (jars.folder(settings) / "planted-0.1.jar").write_bytes(b"PK planted")
    with pytest.raises(StackError, match=r"planted-0\.1\.jar: not in the lock"):
        jars.check(settings)


def test_the_real_jar_folder_passes_the_check() -> None:
    """The stack's folder (filled by `eosflow stack fetch` with mvn) holds the bytes the package's lock names:
    the dev stack and a deployment run Spark with the same jars."""
    if not jars.folder(REAL).is_dir():
        pytest.skip("the Spark jars are not fetched here (`make setup`)")
    assert len(jars.check(REAL)) == len(jars.locked())
