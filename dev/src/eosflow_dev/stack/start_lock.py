"""One start at a time per service: two processes (pytest-xdist workers, a test and a shell) that both
find a service stopped would otherwise both start it, and Iceberg's REST server binds its port with
SO_REUSEPORT, so both would even succeed."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (made if missing) until the block ends; the second caller waits,
    then finds the service running."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, and if this process dies
        yield
