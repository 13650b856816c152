"""Jars from Maven: checksums enforced, and each jar's SHA-256 recorded in infra/jars.sha256 (Spark's: in the
package, eosflow/spark/jars.lock, tests/unit/spark/test_jars.py) and checked."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from eosflow.errors import StackError
from eosflow_dev.runtime import jars
from eosflow_dev.stack import settings as settings_mod

REAL = settings_mod.load()
LOCK = REAL.root / "infra" / "jars.sha256"


def _locked_paths(name: str) -> set[str]:
    return set(jars.locked(REAL, name))


# -- the committed lock --------------------------------------------------------------------------------
def test_the_lock_is_sha256sum_shaped_and_sorted() -> None:
    lines = [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
    assert lines == sorted(lines, key=lambda line: line.split("  ", 1)[1])
    sets = "|".join(re.escape(pom.parent.name) for pom in (REAL.root / "infra" / "maven").glob("*/pom.xml"))
    for line in lines:  # each jar under the folder of a set that has a POM in infra/maven/
        assert re.fullmatch(rf"[0-9a-f]{{64}}  ({sets})/[\w.+/-]+\.jar", line), line


def _pom_jars(name: str) -> list[str]:
    """The jar file names the POM names itself (its direct dependencies, its held versions)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.parse(REAL.root / "infra" / "maven" / name / "pom.xml").getroot()
    props = {p.tag.split("}")[1]: p.text for p in pom.find("m:properties", ns) or []}
    found = []
    for dep in pom.iterfind(".//m:dependency", ns):
        version = re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], dep.find("m:version", ns).text)
        found.append(f"{dep.find('m:artifactId', ns).text}-{version}.jar")
    return found


@pytest.mark.parametrize("name", ["kafka", "spark"])
def test_every_jar_a_pom_declares_is_in_the_lock(name) -> None:
    locked = {path.rsplit("/", 1)[-1] for path in _locked_paths(name)}
    assert _pom_jars(name) and set(_pom_jars(name)) <= locked


def test_the_registry_app_is_in_the_lock() -> None:
    from eosflow_dev.stack.registry import VERSION

    assert f"apicurio-registry-app-{VERSION}-runner.jar" in _locked_paths("registry")
    assert any(path.startswith("lib/") for path in _locked_paths("registry"))


@pytest.mark.parametrize("name", jars.CLASSPATHS)
def test_the_fetched_jars_match_the_lock(name) -> None:
    """Every jar under the fetched folder is in the lock with its hash, and every locked jar is there."""
    if not jars.is_fetched(REAL, name):
        pytest.skip(f"the {name} jars are not fetched here (`eosflow stack fetch`)")
    jars.verify(REAL, name)


# -- mvn -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", jars.CLASSPATHS)
def test_every_mvn_run_enforces_checksums(name) -> None:
    command = jars.mvn_command(REAL, name, "mvn", Path("/tmp/out"))
    assert "--strict-checksums" in command or "-C" in command


@pytest.mark.parametrize("name", ["kafka", "spark"])
def test_the_dependency_plugin_is_pinned_to_a_current_release(name) -> None:
    text = (REAL.root / "infra" / "maven" / name / "pom.xml").read_text()
    m = re.search(r"<artifactId>maven-dependency-plugin</artifactId>\s*<version>([\d.]+)</version>", text)
    assert m and tuple(int(x) for x in m.group(1).split(".")) >= (3, 8)


# -- a copy of a jar folder, tampered ------------------------------------------------------------------------
def _world(tmp_path: Path, files: dict[str, bytes]) -> settings_mod.StackSettings:
    """A checkout with a POM and a lock for the `kafka` set (any set locked in infra/jars.sha256; Spark's is
    locked in the package, tests/unit/spark/test_jars.py), and its jars fetched as the lock says."""
    root = tmp_path / "root"
    (root / "infra" / "maven" / "kafka").mkdir(parents=True)
    (root / "infra" / "maven" / "kafka" / "pom.xml").write_text("<project/>\n")
    settings = dataclasses.replace(REAL, root=root, jars_dir=tmp_path / "jars")
    folder = jars.folder(settings, "kafka")
    for rel, body in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(body)
    lock = "".join(f"{hashlib.sha256(b).hexdigest()}  kafka/{rel}\n" for rel, b in sorted(files.items()))
    (root / "infra" / "jars.sha256").write_text("# comment\n" + lock)
    jars.mark_fetched(settings, "kafka")
    return settings


FILES = {"a-1.0.jar": b"PK a", "lib/b-2.0.jar": b"PK b"}


def test_jars_as_locked_pass(tmp_path) -> None:
    settings = _world(tmp_path, FILES)
    assert jars.is_fetched(settings, "kafka")
    assert jars.fetch(settings, "kafka", log=lambda _: None) == jars.folder(settings, "kafka")


def test_a_changed_jar_is_refused_though_the_marker_says_fetched(tmp_path) -> None:
    settings = _world(tmp_path, FILES)
    with (jars.folder(settings, "kafka") / "lib" / "b-2.0.jar").open("ab") as jar:
        jar.write(b"evil")
    assert jars.is_fetched(settings, "kafka")  # the marker alone would have let it through
    with pytest.raises(StackError, match=r"(?s)lib/b-2\.0\.jar: changed.*eosflow stack fetch --update-lock"):
        jars.fetch(settings, "kafka", log=lambda _: None)


def test_an_extra_jar_is_refused(tmp_path) -> None:
    settings = _world(tmp_path, FILES)
    (jars.folder(settings, "kafka") / "planted-0.1.jar").write_bytes(b"PK planted")
    with pytest.raises(StackError, match=r"planted-0\.1\.jar.*not in infra/jars\.sha256"):
        jars.verify(settings, "kafka")


def test_a_missing_jar_is_refused(tmp_path) -> None:
    settings = _world(tmp_path, FILES)
    (jars.folder(settings, "kafka") / "a-1.0.jar").unlink()
    with pytest.raises(StackError, match=r"a-1\.0\.jar.*missing"):
        jars.verify(settings, "kafka")


def test_a_changed_lock_means_fetch_again(tmp_path) -> None:
    settings = _world(tmp_path, FILES)
    lock = settings.root / "infra" / "jars.sha256"
    lock.write_text(lock.read_text().replace(hashlib.sha256(b"PK a").hexdigest(), "0" * 64))
    assert not jars.is_fetched(settings, "kafka")


def test_another_sets_lock_lines_do_not_refetch_this_one(tmp_path) -> None:
    settings = _world(tmp_path, FILES)
    lock = settings.root / "infra" / "jars.sha256"
    lock.write_text(lock.read_text() + f"{'1' * 64}  registry/k-1.jar\n")
    assert jars.is_fetched(settings, "kafka")


def test_a_copy_of_the_real_spark_jars_tampered_is_refused(tmp_path) -> None:
    if not jars.is_fetched(REAL, "spark"):
        pytest.skip("the spark jars are not fetched here (`eosflow stack fetch`)")
    copy = dataclasses.replace(REAL, jars_dir=tmp_path / "jars")
    shutil.copytree(jars.folder(REAL, "spark"), jars.folder(copy, "spark"))
    jars.verify(copy, "spark")
    victim = sorted(jars.folder(copy, "spark").glob("postgresql-*.jar"))[0]
    body = victim.read_bytes()
    victim.write_bytes(body[:-1] + bytes([body[-1] ^ 1]))  # one bit of the last byte
    with pytest.raises(StackError, match=re.escape(victim.name)):
        jars.verify(copy, "spark")


# -- the command ----------------------------------------------------------------------------------------
def test_update_lock_is_a_flag_of_stack_fetch(capsys) -> None:
    from eosflow.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["stack", "fetch", "--update-lock"])
    assert (args.action, args.update_lock) == ("fetch", True)
    assert parser.parse_args(["stack", "fetch"]).update_lock is False
    other = parser.parse_args(["stack", "status", "--update-lock"])
    assert other.func(other) == 2 and "stack fetch` only" in capsys.readouterr().err


def test_without_the_lock_nothing_is_used(tmp_path) -> None:
    settings = _world(tmp_path, FILES)
    (settings.root / "infra" / "jars.sha256").unlink()
    with pytest.raises(StackError, match="jars.sha256 is missing"):
        jars.verify(settings, "kafka")
