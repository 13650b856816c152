"""Is a pipeline keeping up? What the health DAG (eosflow_health) asks of every pipeline.

A pipeline is stale when records wait in Kafka (lag above zero) and nothing committed for longer than
its limit: N ingest intervals for a batch pipeline (its DAG is paused, failing, or stuck), a few
minutes for a stream pipeline (its `eosflow stream` service is down or stuck; a stream runs outside
Airflow, so Airflow looks at what it leaves in the ledger). An idle pipeline commits nothing and is
healthy as long as nothing waits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import psycopg

from eosflow import pipelines
from eosflow.delivery import Delivery
from eosflow.ledger import store
from eosflow.rows import one_row
from eosflow.settings import Settings, ingest_interval
from eosflow.sources.kafka.offsets import partition_offsets

STREAM_RUNS = "stream\\_\\_%"  # run ids of `eosflow stream`'s batches (LIKE pattern)


def stale_limits(declared: Mapping[str, pipelines.Pipeline]) -> dict[str, float]:
    """Seconds without a commit, while records wait, after which each pipeline is stale: a batch
    pipeline's N ingest intervals (EOSFLOW_STALE_INTERVALS, 3), a stream's
    EOSFLOW_STREAM_STALE_MINUTES (5). The health DAG, the view and the metrics judge by these."""
    interval_s = ingest_interval().total_seconds()
    intervals = float(os.environ.get("EOSFLOW_STALE_INTERVALS", "3"))
    stream_s = 60 * float(os.environ.get("EOSFLOW_STREAM_STALE_MINUTES", "5"))
    return {
        name: stream_s if p.mode == pipelines.PipelineMode.STREAM else intervals * interval_s
        for name, p in sorted(declared.items())
    }


@dataclass(frozen=True)
class PipelineHealth:
    pipeline: str
    lag: int  # records (offsets) in Kafka after the stored positions, all partitions
    last_commit_age_s: float | None  # since the last commit that counts; None: never
    stale_after_s: float
    mode: str = "stream"  # batch: any commit counts; stream: the stream's own batches

    @property
    def ok(self) -> bool:
        return judge(self.lag, self.last_commit_age_s, self.stale_after_s, self.mode, self.pipeline) is None

    def line(self) -> str:
        age = "never" if self.last_commit_age_s is None else f"{self.last_commit_age_s:,.0f}s ago"
        found = judge(self.lag, self.last_commit_age_s, self.stale_after_s, self.mode, self.pipeline)
        what = "stream commit" if self.mode == "stream" else "commit"
        return f"pipeline {self.pipeline}: lag {self.lag:,}, last {what} {age}: " + (found or "healthy")


def judge(
    lag: int, last_commit_age_s: float | None, stale_after_s: float, mode: str = "stream", pipeline: str = ""
) -> str | None:
    """None when healthy, else the one-line reason with the fix."""
    if lag <= 0:
        return None
    if last_commit_age_s is not None and last_commit_age_s <= stale_after_s:
        return None
    since = (
        "has never committed"
        if last_commit_age_s is None
        else f"has not committed for {last_commit_age_s:,.0f}s"
    )
    if mode == "stream":
        fix = (
            "is `eosflow stream` running? (systemd: systemctl status eosflow-stream@<pipeline>; its log "
            "says why)"
        )
        return f"STALE: {lag:,} records wait and the stream {since} (limit {stale_after_s:,.0f}s); {fix}"
    fix = (
        f"is the DAG eosflow_ingest_{pipeline or '<pipeline>'} paused, or are its runs failing? Its last "
        "runs' logs say why"
    )
    return f"STALE: {lag:,} records wait and the pipeline {since} (limit {stale_after_s:,.0f}s); {fix}"


def check(
    settings: Settings, pipeline_name: str, stale_after_s: float, now: datetime | None = None
) -> PipelineHealth:
    pipeline = pipelines.load(settings, pipeline_name)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        lag = 0
        for topic in pipeline.topics:
            stored = store.positions(conn, pipeline.name, topic)
            for partition, offsets in partition_offsets(
                settings.kafka, topic, pipeline.initial_offset, settings.kafka_timeout_s
            ).items():
                position = stored.get(partition)
                lag += max(0, offsets.stable_end - (position if position is not None else offsets.log_start))
        # A stream's health is its own batches': a backfill committing beside a dead stream is no sign
        # of life. A batch pipeline's is any commit's.
        last_commit = conn.execute(
            "select extract(epoch from coalesce(%s, now()) - max(committed_at))::float8 from eosflow.plans "
            "where pipeline = %s and status = 'committed' and (%s or run_id like %s)",
            (now, pipeline.name, pipeline.mode != pipelines.PipelineMode.STREAM, STREAM_RUNS),
        )
        (age,) = one_row(last_commit)
    return PipelineHealth(pipeline.name, lag, age, stale_after_s, pipeline.mode)


# -- publishers --------------------------------------------------------------------------------------


def publisher_stale_limit() -> float:
    """Seconds an open transaction may hold a publisher's committed rows back before the publisher is
    stale: EOSFLOW_PUBLISH_STALE_MINUTES (5)."""
    return 60 * float(os.environ.get("EOSFLOW_PUBLISH_STALE_MINUTES", "5"))


@dataclass(frozen=True)
class PublisherHealth:
    publisher: str
    held: int  # committed rows after the position that wait for older transactions to end
    blocked_s: float | None  # the oldest open transaction's age (None: none this role can see)
    blockers: tuple[str, ...]  # the oldest open transactions, one line each (eosflow.open_transactions)
    stale_after_s: float
    position: str | None = None  # the last published row, "xid/id" (None: nothing published yet)
    unseen: str | None = None  # what this role cannot read, and the grant that lets it
    counted: bool = True  # False: this role cannot count the outbox's rows (eosflow.outbox_waiting)

    @property
    def judged(self) -> bool:
        return self.counted

    @property
    def ok(self) -> bool:
        return self.held == 0 or self.blocked_s is None or self.blocked_s <= self.stale_after_s

    def line(self) -> str:
        if not self.judged:
            return f"publisher {self.publisher}: not judged: {self.unseen}"
        if self.held == 0:
            return f"publisher {self.publisher}: no committed row waits: healthy"
        seen = [*self.blockers, *([self.unseen] if self.unseen else [])]
        who = "; ".join(seen) or "no transaction is open now (the next read takes them)"
        if self.ok:
            return f"publisher {self.publisher}: {self.held:,} committed row(s) wait for: {who}: healthy"
        return (
            f"STALE: publisher {self.publisher}: {self.held:,} committed row(s) held back for "
            f"{self.blocked_s:,.0f}s (limit {self.stale_after_s:,.0f}s) by older transactions still open "
            f"(a row is published once every transaction older than it has ended): {who}. End or commit a "
            "forgotten one (pg_terminate_backend(pid), COMMIT/ROLLBACK PREPARED 'gid')"
        )


def check_publisher(settings: Settings, name: str, stale_after_s: float) -> PublisherHealth:
    """The health DAG's check, as the pipelines' own role."""
    from eosflow.publish.declaration import load_publisher

    publisher = load_publisher(settings, name)
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        return publisher_health(conn, settings.kafka, publisher, stale_after_s)


# What the read-only role may call (migration 012), never the outbox or pg_stat_activity's query text.
WAITING = "eosflow.outbox_waiting(text,xid8)"
OPEN_TRANSACTIONS = "eosflow.open_transactions(double precision)"
SHOWN = 5  # the oldest open transactions named


def publisher_health(conn, kafka: Mapping[str, str], publisher, stale_after_s: float) -> PublisherHealth:
    """How many of a publisher's committed rows an open transaction holds back, and which transaction;
    as any role that may call eosflow's two functions (the view's reader may; it reads neither the outbox
    nor other sessions' queries). What it cannot see it names, with the grant that lets it."""
    from eosflow.publish import offsets as outbox_offsets
    from eosflow.publish import position as outbox_position

    name = publisher.name
    role = conn.execute("select current_user").fetchone()[0]
    if cannot := _cannot_call(conn, WAITING, role):
        return PublisherHealth(name, 0, None, (), stale_after_s, None, cannot, False)
    if _waiting(conn, name, None) is None:  # never published: nothing waits
        return PublisherHealth(name, 0, None, (), stale_after_s)
    if publisher.delivery == Delivery.EXACTLY_ONCE:
        current = outbox_offsets.read(kafka, publisher)
    else:
        current = outbox_position.read_stored(conn, publisher)
    position = None if current is None else f"{current.xid}/{current.id}"
    held = _waiting(conn, name, None if current is None else current.xid) or 0
    if cannot := _cannot_call(conn, OPEN_TRANSACTIONS, role):
        return PublisherHealth(name, held, None, (), stale_after_s, position, cannot)
    found = conn.execute(
        "select pid, gid, database, username, application_name, state, age_s "
        "from eosflow.open_transactions() limit %s",
        (SHOWN,),
    ).fetchall()
    age = found[0][6] if found else None  # oldest first; NULL ages (hidden from the owner) last
    blockers = tuple(_blocker(*row) for row in found) if held else ()
    return PublisherHealth(name, held, age, blockers, stale_after_s, position, _hidden_sessions(conn))


def _waiting(conn, publisher: str, after_xid: int | None) -> int | None:
    return conn.execute(
        "select eosflow.outbox_waiting(%s, %s::text::xid8)",
        (publisher, None if after_xid is None else str(after_xid)),
    ).fetchone()[0]


def _cannot_call(conn, function: str, role: str) -> str | None:
    """Why `role` cannot call one of eosflow's functions, with the fix; None when it can."""
    found, may = conn.execute(
        "select to_regprocedure(%s) is not null, has_function_privilege(to_regprocedure(%s), 'execute')",
        (function, function),
    ).fetchone()
    if not found:
        return (
            f"this warehouse has no {function}, or {role} may not use schema eosflow: eosflow's migrations "
            "apply it (any `eosflow ingest` or `eosflow publish`); docs/readonly-role.sql grants the schema"
        )
    if not may:
        return f"{role} may not call {function}: GRANT EXECUTE ON FUNCTION {function} TO {role}"
    return None


def _hidden_sessions(conn) -> str | None:
    """What eosflow.open_transactions cannot tell when its owner may not see other roles' sessions."""
    owner, sees_all = conn.execute(
        "select r.rolname, r.rolsuper or pg_has_role(r.oid, 'pg_read_all_stats', 'usage') "
        "from pg_proc p join pg_roles r on r.oid = p.proowner where p.oid = to_regprocedure(%s)",
        (OPEN_TRANSACTIONS,),
    ).fetchone()
    if sees_all:
        return None
    return (
        f"{owner}, which {OPEN_TRANSACTIONS} runs as, sees other roles' open transactions without their "
        f"state and age: GRANT pg_read_all_stats TO {owner}"
    )


def _blocker(
    pid: int | None,
    gid: str | None,
    database: str,
    user: str,
    application: str | None,
    state: str | None,
    age_s: float | None,
) -> str:
    """One open transaction as the view, the health DAG and the troubleshooting page name it."""
    if gid is not None:
        return f"prepared transaction {gid!r} (database {database}, prepared {age_s:,.0f}s ago)"
    app = f", application {application}" if application else ""
    held = "state and age hidden" if age_s is None else f"{state}, open {age_s:,.0f}s"
    return f"pid {pid} (database {database}, user {user}{app}, {held})"
