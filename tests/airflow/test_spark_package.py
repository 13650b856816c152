"""The code archive each Spark task ships (--py-files): complete and of one version, whoever else packages."""

from __future__ import annotations

import dataclasses
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eosflow.spark import code_archive, submit


def _contents(archive: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(archive) as zf:
        assert zf.testzip() is None, f"{archive} is corrupt"
        return {name: zf.read(name) for name in zf.namelist()}


def _source_files(source: Path) -> dict[str, bytes]:
    return {
        f"eosflow/{p.relative_to(source).as_posix()}": p.read_bytes()
        for p in source.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_concurrent_packaging_gives_every_caller_a_complete_archive(settings, tmp_path):
    state = dataclasses.replace(settings, state_dir=tmp_path)
    expected = _source_files(Path(submit.__file__).resolve().parents[1])
    for _ in range(3):  # plan and Spark tasks of several DAG runs package at the same moment
        with ThreadPoolExecutor(8) as pool:
            archives = list(pool.map(lambda _: code_archive.package(state), range(8)))
        for archive in archives:
            assert _contents(archive) == expected


def test_a_package_after_a_source_edit_is_a_new_archive_and_the_earlier_one_stays_as_it_was(
    settings, tmp_path
):
    source = tmp_path / "src" / "eosflow"
    (source / "runners").mkdir(parents=True)
    (source / "__init__.py").write_text("")
    (source / "runners" / "job.py").write_text("VERSION = 1\n")
    state = dataclasses.replace(settings, state_dir=tmp_path / "state")

    first = code_archive.package(state, source=source)
    (source / "runners" / "job.py").write_text("VERSION = 2\n")
    second = code_archive.package(state, source=source)

    # A Spark task submitted with the first archive keeps reading version 1; the next gets version 2.
    assert first != second
    assert _contents(first)["eosflow/runners/job.py"] == b"VERSION = 1\n"
    assert _contents(second)["eosflow/runners/job.py"] == b"VERSION = 2\n"
    assert _contents(second) == _source_files(source)
    assert code_archive.package(state, source=source) == second  # same code, same archive
    assert not list((tmp_path / "state" / "dist").glob("*.tmp"))  # no leftovers
