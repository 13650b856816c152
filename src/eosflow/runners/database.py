"""A `database:` entry's run: discovery, then each member's own run (docs/DESIGN.md, "Running a database").

Each member is a pipeline: its run is `job.run`'s, with its own plan, transaction and outcome. One member's
failure is reported and the others still run; the entry's exit code is the worst of theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import psycopg

from eosflow import pipelines
from eosflow.databases import store
from eosflow.databases.discover import Discovery, discover
from eosflow.ledger.migrate import migrate
from eosflow.runners import job
from eosflow.runners.outcomes import EXIT, reported
from eosflow.runners.summary import RunSummary
from eosflow.settings import Settings

Log = Callable[[str], None]
# A member's run wrapped (its lineage reported): entered with the member's name, handed its summary.
MemberRun = Callable[[str], AbstractContextManager[Callable[[RunSummary], None]]]


def _ignored(summary: RunSummary) -> None:
    pass


def database_entry(settings: Settings, name: str) -> pipelines.databases.Database | None:
    """The file's database entry `name`, None if `name` is not one; a refused entry raises why."""
    found, refused = pipelines.load_databases(settings)
    if name in refused:
        raise refused[name]
    return found.get(name)


def discover_members(
    settings: Settings, database: pipelines.databases.Database, log: Log
) -> tuple[Discovery, list[str]]:
    """Discovery, then the entry's members as recorded (every one: a table whose topic is gone keeps its
    member, its ledger and its targets)."""
    migrate(settings.warehouse_dsn, log=log)
    declared, _ = pipelines.load_each(settings)
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        found = discover(conn, settings.kafka, database, frozenset(declared), log)
        return found, [m.member for m in store.members(conn, database.name)]


@dataclass
class DatabaseRun:
    """Each member's outcome: its summary, or the exit code and line of why it did not commit."""

    entry: str
    summaries: dict[str, RunSummary] = field(default_factory=dict)
    failures: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return max((code for code, _ in self.failures.values()), default=0)

    def table(self) -> str:
        lines = [f"database entry {self.entry}: {len(self.summaries) + len(self.failures)} members"]
        for name in sorted(self.summaries.keys() | self.failures.keys()):
            if name in self.summaries:
                s = self.summaries[name]
                written = sum(c.written for c in s.counts.values())
                rejected = sum(c.rejected for c in s.counts.values())
                lines.append(f"  {name}: {s.outcome}, {written:,} written, {rejected:,} rejected")
            else:
                code, line = self.failures[name]
                lines.append(f"  {name}: FAILED (exit {code}): {line}")
        return "\n".join(lines)


def run(
    settings: Settings,
    database: pipelines.databases.Database,
    run_id: str | None,
    max_records: int | None,
    acknowledge_data_loss: bool,
    log: Log,
    around: MemberRun | None = None,
) -> DatabaseRun:
    """Discover, then run every member once, each on its own. around: what each member's run is wrapped
    in, given its name, and told its summary (the CLI's OpenLineage report: eosflow.spark.job_main)."""
    _, members = discover_members(settings, database, log)
    run_id = run_id or job.new_run_id()
    done = DatabaseRun(database.name)
    for name in members:
        try:
            with around(name) if around else nullcontext(_ignored) as completed:
                summary = job.run(settings, name, run_id, max_records, acknowledge_data_loss, log)
                completed(summary)
            done.summaries[name] = summary
        except tuple(EXIT) as exc:
            done.failures[name] = reported(exc)
            log(f"{name}: {done.failures[name][1]}")
    return done
