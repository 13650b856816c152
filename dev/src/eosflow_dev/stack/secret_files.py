"""Files that hold a secret: mode 0600 before their first byte, never written through a link.

A secret file is a new file each time: created beside its path under a random name with O_EXCL and
O_NOFOLLOW (so a link planted there is never followed), 0600 whatever the umask, written, then renamed
over the path. A file that was there before, perhaps readable to all, is replaced, not truncated: whoever
had it open keeps the old bytes and never sees the new secret. A symbolic link at the path is refused.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from eosflow.errors import StackError


def write_secret(path: Path, text: str, owner: tuple[int, int] | None = None) -> None:
    """Write `text` to `path`, mode 0600 (owned by `owner` (uid, gid) when given) from the start."""
    _refuse_link(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o600)  # the umask can only narrow the mode; make it exactly 0600
            if owner is not None:
                os.fchown(out.fileno(), *owner)
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)  # a link planted since the check is replaced, never followed
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise


def _refuse_link(path: Path) -> None:
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(found.st_mode):
        raise StackError(
            f"{path} is a symbolic link, where eosflow keeps a secret: it will not write through it. "
            "Check who made it, remove it, and try again"
        )
    if not stat.S_ISREG(found.st_mode):
        raise StackError(
            f"{path} is not a regular file, where eosflow keeps a secret: remove it, and try again"
        )
