"""The warehouse sink (`sink: warehouse`, the default): its truth is the warehouse itself.

Each Spark task COPYs its range into staging (stage.py); one Postgres transaction then makes the rows,
the rejected rows, the ledger rows and the positions visible together (commit.py). dbt checks the
invariants on the table (eosflow.dbt_build).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, cast

import psycopg
from psycopg import sql

from eosflow import names
from eosflow.delivery import Delivery
from eosflow.errors import PipelineConfigError
from eosflow.faults import fault_point
from eosflow.ledger.ranges import Plan
from eosflow.rows import one_row
from eosflow.schema.declaration import RecordSchema
from eosflow.settings import Settings
from eosflow.sinks.deletes import Deletes
from eosflow.sinks.deletes import parse as parse_deletes
from eosflow.sinks.postgres import partitions
from eosflow.sinks.protocol import Log, Pipeline, Run, Sink, Verdict

HOLD_WAIT_S = 120  # how long a verification waits for a commit or replay in flight on its target


@contextmanager
def _commits_held(dsn: str, target: str) -> Iterator[None]:
    """The target's commits and replays held off while dbt reads it beside the ledger, on a connection of
    this verification's own (dbt's are dbt's): docs/DESIGN.md "Partitioned targets"."""
    with psycopg.connect(dsn) as conn:
        (exists,) = one_row(conn.execute("select to_regclass(%s) is not null", (target,)))
        if exists:  # a target not made yet: dbt's own error says so
            conn.execute(f"set lock_timeout = '{HOLD_WAIT_S}s'")
            try:
                conn.execute(partitions.hold_commits(target))
            except psycopg.errors.LockNotAvailable as exc:
                raise TimeoutError(
                    f"eosflow verify waited {HOLD_WAIT_S} s for a commit or replay on {target} to end, "
                    "so that it reads the table and its ledger at one point: run it again once that run "
                    "ends (pg_stat_activity shows what holds the table)"
                ) from exc
        yield  # the connection's context ends the transaction, and the lock with it


@dataclass(frozen=True)
class PostgresSink(Sink):
    kind: ClassVar[str] = "warehouse"
    keys: ClassVar[frozenset[str]] = frozenset({"target_table", "state_table", "deletes"})
    truth: ClassVar[str] = "warehouse"
    task_modules: ClassVar[tuple[str, ...]] = ("eosflow.sinks.postgres.stage",)
    keeps_state: ClassVar[bool] = True
    # The comparison modes too: the state apply commits in the output's transaction (commit.py).
    state_deliveries: ClassVar[tuple[Delivery, ...]] = tuple(Delivery)

    target_table: str  # a change stream's changelog
    state_table: str = ""  # a change stream's current state, one row per primary key (state.py)
    deletes: Deletes = Deletes.HARD

    @classmethod
    def declare(cls, spec: Mapping[str, Any], schema: RecordSchema, where: str) -> PostgresSink:
        table = names.table(
            spec.get("target_table", ""), "target_table", where, table_bytes=names.TARGET_TABLE_BYTES
        )
        if schema.changes is None:
            if misplaced := sorted({"state_table", "deletes"} & set(spec)):
                raise PipelineConfigError(
                    f"{where}: {misplaced} keep a change stream's current state; add changes: debezium (or "
                    "keyed) and primary_key, or remove them"
                )
            return cls(table)
        if spec.get("state_table") is None:
            raise PipelineConfigError(
                f"{where}: changes: {schema.changes} needs state_table, the table of each key's current row "
                "(target_table keeps every change)"
            )
        state = names.table(spec["state_table"], "state_table", where)
        if state == table:
            raise PipelineConfigError(f"{where}: state_table and target_table must be two tables")
        deletes = parse_deletes(spec, where)
        return cls(table, state, deletes)

    @property
    def output(self) -> str:
        return self.target_table

    @property
    def table(self) -> str:
        return self.target_table

    def output_uri(self, settings: Settings) -> str:
        from eosflow.assets import table_uri

        return table_uri(settings, self.target_table)

    def lineage_outputs(self, settings: Settings) -> tuple[str, ...]:
        """The changelog (the output), and a change stream's state table, written in the same transaction."""
        from eosflow.assets import table_uri

        state = (table_uri(settings, self.state_table),) if self.state_table else ()
        return (self.output_uri(settings), *state)

    def prepare(self, conn: psycopg.Connection, settings: Settings, pipeline: Pipeline, log: Log) -> None:
        """The target made (or evolved) from the declaration; staging a crashed run left, swept."""
        from eosflow.sinks.postgres import target

        with conn.transaction():  # a change stream's two tables follow the declaration together
            target.ensure_target(conn, pipeline, log)
            if self.state_table:
                from eosflow.sinks.postgres.state import ensure_state_table

                ensure_state_table(conn, pipeline, self.state_table, self.deletes is Deletes.SOFT, log)
        target.sweep_staging(conn, log)

    def write(self, conn: psycopg.Connection, run: Run) -> dict[tuple[str, int], int]:
        """Steps 2 to 4 as one Spark job: each task reads its range, checks it and COPYs it to staging.
        Returns the records read per (topic, partition), which the commit checks staging against."""
        from eosflow.sinks.postgres.commit import stages_by_range
        from eosflow.sinks.postgres.stage import stage
        from eosflow.sources.kafka.read import check_within_plan

        plan = run.plan
        if not plan.nonempty:
            return {}
        by_range = stages_by_range(conn, run.pipeline, plan)
        with run.read("read+transform+stage") as result:
            staged = stage(run.settings, run.pipeline, plan, result, by_range=by_range)
        records_read = check_within_plan(plan, staged.read)
        run.log(
            f"read {sum(records_read.values()):,} records and staged them: "
            f"{staged.valid:,} rows, {staged.rejected:,} rejected"
        )
        # The pass reads and stages together, so both points stand after it: the state a crash leaves
        # there is the same (staged, not committed), and the lab still kills at each named boundary.
        fault_point("after_read")
        fault_point("after_stage")
        run.check_topics_unchanged()
        return records_read

    def commit(self, conn: psycopg.Connection, run: Run, written: object):
        from eosflow.sinks.postgres.commit import commit, commit_replay
        from eosflow.sources.kafka.read_back import records_at

        commit_fn = commit_replay if run.plan.kind == "replay" else commit
        raw = partial(records_at, run.settings.kafka)  # a change rejected at commit, quoted as in Kafka
        with run.time("commit"):
            records_read = cast("dict[tuple[str, int], int]", written)  # what write returned
            return commit_fn(conn, run.pipeline, run.plan, records_read, run.time_within, raw)

    def verify(self, settings: Settings, pipeline: Pipeline, marts: bool) -> Verdict:
        from eosflow.dbt_build import MART_COLUMNS, run_dbt

        declared = {c.name for c in pipeline.schema.columns}
        state = None
        if self.state_table:  # a change stream: S1-S3 compare its state table with the changelog
            from eosflow.schema.changes import declared as image

            schema_name, table = self.state_table.split(".")
            state = {
                "state_table": table,
                "state_schema": schema_name,
                "primary_key": list(pipeline.schema.primary_key),
                "image_columns": [c.name for c in image(pipeline.schema)],
                "soft_deletes": self.deletes is Deletes.SOFT,
            }
        with _commits_held(settings.warehouse_dsn, self.target_table):
            return run_dbt(
                settings,
                pipeline.name,
                self.target_table,
                business_key=pipeline.schema.business_key,
                marts=marts and declared >= MART_COLUMNS,
                state=state,
            )

    def latencies(
        self, settings: Settings, pipeline: Pipeline, plan: Plan, committed_at: float
    ) -> tuple[float, ...]:
        """Read back from the target through its (topic, partition, offset) key."""
        ranges = plan.nonempty
        if not ranges:
            return ()
        query = sql.SQL(" union all ").join(
            sql.SQL(
                "select extract(epoch from kafka_timestamp)::float8 from {} where kafka_topic = {} "
                "and kafka_partition = {} and kafka_offset >= {} and kafka_offset < {} "
                "and kafka_timestamp is not null"
            ).format(
                sql.Identifier(*self.target_table.split(".")),
                sql.Literal(r.topic),
                sql.Literal(r.partition),
                sql.Literal(r.start),
                sql.Literal(r.end),
            )
            for r in ranges
        )
        with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
            return tuple(committed_at - ts for (ts,) in conn.execute(query))

    def compact(self, conn: psycopg.Connection, pipeline: Pipeline, target_rows: int | None, log: Log):
        from eosflow.sinks.postgres import partitions
        from eosflow.sinks.postgres.compact import compact

        if not partitions.is_partitioned(conn, self.target_table):
            log(
                f"{pipeline.name}: {self.target_table} is not partitioned (not made yet, not exactly_once, "
                "or not migrated)"
            )
            return None
        if target_rows is None:
            return compact(conn, pipeline.name, self.target_table, log=log)
        return compact(conn, pipeline.name, self.target_table, target_rows, log=log)

    def compact_stream(self, conn: psycopg.Connection, pipeline: Pipeline, between: Callable[[int], bool]):
        from eosflow.sinks.postgres import partitions
        from eosflow.sinks.postgres.compact import compact

        if not partitions.is_partitioned(conn, self.target_table):
            return None  # each commit copies into the one table: nothing piles up
        done = compact(conn, pipeline.name, self.target_table, commits_only=True, between=between)
        return done if done.merged or done.skipped else None
