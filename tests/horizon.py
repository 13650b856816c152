"""Wait until the publisher can see an outbox's committed rows.

The publisher takes only rows from transactions below its snapshot's xmin, which is cluster-wide: on a
shared Postgres (two test workers), another test's open transaction holds rows back that a lone run
would publish at once. Tests that count what one publish sends wait for that horizon first, so the
count stays exact.
"""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from eosflow.publish import outbox
from eosflow.publish.declaration import Publisher


def settle(dsn: str, publisher: Publisher, timeout_s: float = 60.0) -> None:
    """Give the outbox its position column, then wait until every committed row is below the horizon."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        outbox.prepare(conn, publisher, log=lambda m: None)
        newest = conn.execute(
            sql.SQL("select max({})::text::bigint from {}").format(
                sql.Identifier(outbox.XID_COLUMN), sql.Identifier(*publisher.table.split("."))
            )
        ).fetchone()[0]
        if newest is None:
            return
        deadline = time.monotonic() + timeout_s
        while True:
            horizon = conn.execute("select pg_snapshot_xmin(pg_current_snapshot())::text::bigint").fetchone()[
                0
            ]
            if horizon > newest or time.monotonic() > deadline:
                return  # past the deadline the test's own count says what is missing
            time.sleep(0.2)
