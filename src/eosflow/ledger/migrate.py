"""Versioned SQL migrations, applied in file-name order, each once, each in its own transaction."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg

MIGRATIONS = Path(__file__).with_name("migrations")
# Any constant works; it keeps two processes from applying the same migration at once.
_LOCK_KEY = 0x0E05F10
# Warehouses this process has brought up to date: a process runs every migration it ships before its
# first run, so later runs (a stream's batches, a backfill's chunks, the tests) need not ask again.
_CURRENT: set[str] = set()


def pending(conn: psycopg.Connection) -> list[Path]:
    conn.execute(
        "create table if not exists public.schema_migrations "
        "(version text primary key, applied_at timestamptz not null default now())"
    )
    done = {row[0] for row in conn.execute("select version from public.schema_migrations")}
    return [p for p in sorted(MIGRATIONS.glob("*.sql")) if p.stem not in done]


def forget() -> None:
    """Ask the warehouse again at the next migrate() (after a reset wiped it)."""
    _CURRENT.clear()


def migrate(dsn: str, log: Callable[[str], None] = print) -> list[str]:
    """Apply what is pending, once per warehouse and process; returns the versions applied now."""
    if dsn in _CURRENT:
        return []
    applied: list[str] = []
    with psycopg.connect(dsn) as conn:
        conn.execute("select pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            conn.commit()
            for path in pending(conn):
                with conn.transaction():
                    conn.execute(path.read_text())
                    conn.execute("insert into public.schema_migrations (version) values (%s)", (path.stem,))
                applied.append(path.stem)
                log(f"applied migration {path.stem}")
            conn.commit()
        finally:
            conn.execute("select pg_advisory_unlock(%s)", (_LOCK_KEY,))
            conn.commit()
    _CURRENT.add(dsn)
    return applied
