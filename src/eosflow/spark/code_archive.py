"""The eosflow package as it is at this moment, zipped: what every Spark run ships to its Python workers
(spark-submit's --py-files, a Spark Connect session's artifact), named by its contents."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eosflow.settings import Settings

_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same code always gives the same bytes
_KEEP_SECONDS = 7 * 24 * 3600  # far longer than any Spark job runs on an archive
PACKAGE = Path(__file__).resolve().parents[1]  # the eosflow package this module is part of


def package(settings: Settings, source: Path | None = None) -> Path:
    """Zip the eosflow package for --py-files, named by its contents: `dist/eosflow-<sha256>.zip`.

    Built on every call, so it is never stale. Each caller writes its own temporary file and renames
    it into place, so concurrent callers never see a half-written archive, and an archive a running
    Spark job uses is never replaced by another version (same name, same bytes).
    """
    source = source or PACKAGE
    dist = settings.state_dir / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dist, prefix=".eosflow-", suffix=".zip.tmp")
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in _files(source):
                _add(digest, name, data)
                info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
                info.external_attr = 0o644 << 16
                zf.writestr(info, data, zipfile.ZIP_DEFLATED)
        target = dist / f"eosflow-{digest.hexdigest()[:16]}.zip"
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _prune(dist, keep=target)
    return target


def code_digest(source: Path | None = None) -> str:
    """The code's name: the digest `package` names its archive by, of the same files, without the archive.
    A warm Spark Connect server's workers compare it with their own (eosflow.spark.server_code)."""
    digest = hashlib.sha256()
    for name, data in _files(source or PACKAGE):
        _add(digest, name, data)
    return digest.hexdigest()[:16]


def _files(source: Path) -> Iterator[tuple[str, bytes]]:
    """The package's files as the archive names them, in a fixed order; each read once, so a name is of
    exactly the bytes read."""
    for path in sorted(source.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield (Path("eosflow") / path.relative_to(source)).as_posix(), path.read_bytes()


def _add(digest: Any, name: str, data: bytes) -> None:
    digest.update(f"{name}\0{len(data)}\0".encode() + data)


def _prune(dist: Path, keep: Path) -> None:
    """Drop archives (and leftovers of killed writers) untouched for a week; packaging touches its own."""
    cutoff = time.time() - _KEEP_SECONDS
    for path in [*dist.glob("eosflow-*.zip"), *dist.glob(".eosflow-*.zip.tmp"), dist / "eosflow.zip"]:
        try:
            if path != keep and path.stat().st_mtime < cutoff:
                path.unlink()
        except FileNotFoundError:
            pass  # another caller pruned it first
