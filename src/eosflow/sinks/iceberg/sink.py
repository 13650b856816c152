"""The Iceberg sink (`sink: iceberg`): Kafka into an Apache Iceberg table; its truth is the table.

Each Spark task writes its range's rows as Parquet files (files.py); the driver adds every range's files
and sets the table's positions in one Iceberg commit, fenced by the catalog's compare-and-swap
(commit.py); the ledger then mirrors the committed ranges and their rejected rows (eosflow.ledger.mirror),
and the next run first mirrors whatever a crash left unmirrored. The catalog and the files: catalog.py.
With `changes:` the table is the change stream's state, one row per primary key: the tasks stage the
checked changes and the same one commit applies them (state.py; verify_state.py checks it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import psycopg

from eosflow import names
from eosflow.delivery import Delivery
from eosflow.errors import PipelineConfigError
from eosflow.faults import fault_point
from eosflow.ledger.backfill import BackfillMode
from eosflow.rows import one_row
from eosflow.schema.declaration import RecordSchema
from eosflow.settings import Settings
from eosflow.sinks.deletes import Deletes
from eosflow.sinks.deletes import parse as parse_deletes
from eosflow.sinks.protocol import Log, Pipeline, Run, Sink, Verdict


@dataclass(frozen=True)
class IcebergSink(Sink):
    """Where a `sink: iceberg` pipeline writes: one Iceberg commit per run, positions in the table."""

    kind: ClassVar[str] = "iceberg"
    keys: ClassVar[frozenset[str]] = frozenset({"table", "deletes"})
    truth: ClassVar[str] = "iceberg"
    task_modules: ClassVar[tuple[str, ...]] = ("eosflow.sinks.iceberg.files",)
    # With changes: the table is the state, one row per primary key (state.py).
    keeps_state: ClassVar[bool] = True

    iceberg_table: str  # namespace.name in the catalog
    deletes: Deletes = Deletes.HARD  # a change stream's (sinks/deletes.py)

    @classmethod
    def declare(cls, spec: Mapping[str, Any], schema: RecordSchema, where: str) -> IcebergSink:
        if spec.get("table") is None:
            raise PipelineConfigError(f"{where}: sink: iceberg needs a table: namespace.name in lower case")
        # A namespace is a schema to the engines that read the catalog (Spark, Trino): the same names as
        # a warehouse target, refused in the same schemas.
        table = names.table(spec["table"], "table", where, shape="namespace.name")
        if spec.get("delivery", Delivery.EXACTLY_ONCE) != Delivery.EXACTLY_ONCE:
            raise PipelineConfigError(
                f"{where}: an iceberg sink delivers exactly_once only (its positions commit with its files)"
            )
        if schema.changes is None:
            if "deletes" in spec:
                raise PipelineConfigError(
                    f"{where}: deletes says what a change stream's delete does to its state table; add "
                    "changes: debezium (or keyed) and primary_key, or remove deletes"
                )
            return cls(table)
        deletes = parse_deletes(spec, where)
        return cls(table, deletes)

    @property
    def output(self) -> str:
        return f"iceberg {self.iceberg_table}"

    def output_uri(self, settings: Settings) -> str:
        from eosflow.sinks.iceberg.config import CatalogConfig

        return f"iceberg://{CatalogConfig.of(settings).name}/{self.iceberg_table.replace('.', '/')}"

    def lineage_outputs(self, settings: Settings) -> tuple[str, ...]:
        """The table by its location, as OpenLineage names a table in storage (DESIGN.md, "OpenLineage"):
        none while the table does not exist (the START of the run that makes it) or its catalog does not
        answer, for lineage never fails a run, and a name the catalog alone knows would be a second one."""
        from eosflow.sinks.iceberg.catalog import catalog

        try:
            return (catalog(settings).load_table(self.iceberg_table).location(),)
        except Exception:  # noqa: BLE001 - no table yet, or no catalog now: this event names no output
            return ()

    def describe(self) -> str:
        return f"Iceberg table `{self.iceberg_table}`"

    # --- a run

    def prepare(self, conn: psycopg.Connection, settings: Settings, pipeline: Pipeline, log: Log) -> None:
        """The table made (or evolved) from the declaration; the ledger caught up with the table."""
        from eosflow.ledger import mirror, store
        from eosflow.schema.arrow import valid_columns
        from eosflow.sinks.iceberg import catalog, state, storage
        from eosflow.sinks.iceberg.config import CatalogConfig
        from eosflow.sinks.iceberg.reach import reaching

        # The catalog, the table and the store are all reached before planning: whatever refuses or does
        # not answer stops the run here, before a file is written (docs/DESIGN.md, "Refusals").
        config = CatalogConfig.of(settings)
        with reaching(config, f"preparing Iceberg table {self.iceberg_table}"):
            schema = pipeline.schema
            key: tuple[str, ...]
            if schema.changes is None:
                columns, key = valid_columns(schema), ()
            else:  # the table is the state: a row per key (state.py)
                columns, key = state.columns(schema, self.deletes is Deletes.SOFT), schema.primary_key
            renamed = store.renamed_columns(conn, pipeline.name, pipeline.schema)
            table = catalog.ensure_table(config.load(), self.iceberg_table, columns, log, key, renamed)
            storage.probe(table)
        # The table is read only once reconcile has read the ledger: the table commits before the
        # ledger mirrors, so a table read after the ledger is never behind it, whatever another run
        # commits meanwhile (read before it, a run committing in between looked like a gap).
        loaded: list = []

        def in_table(topic: str, partitions: list[int]):
            with reaching(config, f"reading Iceberg table {self.iceberg_table}'s positions"):
                loaded[:] = [table.refresh()]
            held = catalog.positions(loaded[0])
            return {p: held[(topic, p)] for p in partitions if (topic, p) in held}

        def rejected(conn: psycopg.Connection, plan, parts) -> None:
            files = catalog.rejected_files(loaded[0]), catalog.rejected_files(loaded[0], "replay")
            _rejected_rows(*files, storage.io_properties(loaded[0]))(conn, plan, parts)

        mirror.reconcile(conn, pipeline.name, pipeline.topics, in_table, self._where, log, rejected)

    @property
    def _where(self) -> str:
        return f"Iceberg table {self.iceberg_table}"

    def write(self, conn: psycopg.Connection, run: Run) -> dict:
        """Each Spark task writes its range's files; the driver commits them all, with the positions, in
        one Iceberg commit. Returns each range's outcome (committed in the table when this returns)."""
        from functools import partial

        from eosflow.sinks.iceberg import catalog, commit, files, state, storage
        from eosflow.sinks.iceberg.config import CatalogConfig
        from eosflow.sinks.iceberg.reach import reaching
        from eosflow.sources.kafka.read_back import records_at

        plan = run.plan
        schema = run.pipeline.schema
        written: dict[tuple[str, int], files.Written] = {}
        table = catalog.load(run.settings, self.iceberg_table)
        if plan.nonempty:
            run.check_topics_unchanged()
            properties = storage.io_properties(table)
            with run.read("read+transform+write files") as result:
                # A change stream's tasks stage its checked changes; the commit applies them (state.py).
                folder = "data" if schema.changes is None else state.STAGED_FOLDER
                write = files.range_writer(table.location(), properties, plan.batch_id, result.check, folder)
                rows = result.map_records(write, files.WRITTEN_SCHEMA).collect()
            for row in rows:
                written.setdefault((row.kafka_topic, row.kafka_partition), files.Written()).add(row)
            # The files are written and nothing names them yet: the state a warehouse sink's staging
            # leaves, so the same two points stand here (the lab kills at each named boundary).
            fault_point("after_read")
            fault_point("after_stage")
        config = CatalogConfig.of(run.settings)
        # A catalog that stops answering now leaves the commit's fate unknown: the table's positions tell
        # the next run (it mirrors a commit that landed, and re-plans one that did not).
        after = "whether the commit landed, the next run reads from the table's positions"
        with run.time("iceberg commit"), reaching(config, f"committing to {self.iceberg_table}", after):
            if plan.kind == "replay":
                outcomes = commit.commit_replay(table, plan, written, self._committed_in(conn, run, table))
            elif schema.changes is not None:
                kafka = run.settings.kafka
                raw = partial(records_at, kafka)  # a rejected change's record, quoted as it is in Kafka
                soft = self.deletes is Deletes.SOFT
                outcomes = state.commit(table, plan, written, schema, soft, run.log, raw)
            else:
                outcomes = commit.commit(table, plan, written)
        run.log(
            f"{'staged' if schema.changes else 'wrote'} {sum(w.written for w in written.values()):,} rows in "
            f"{sum(len(w.data_files) for w in written.values())} files and "
            f"{sum(w.rejected for w in written.values()):,} rejected; one Iceberg commit to "
            f"{self.iceberg_table}: "
            + ", ".join(f"{t}[{p}] {o.outcome}" for (t, p), o in sorted(outcomes.items()))
        )
        return {
            "outcomes": outcomes,
            "rejected_files": {k: w.rejected_files for k, w in written.items()},
            "io_properties": storage.io_properties(table),
        }

    def _committed_in(self, conn: psycopg.Connection, run: Run, table):
        """What a replay's re-read is checked against: the rows the table holds in the range (at the
        snapshot the replay commits on) and the range's rejected rows (the ledger mirrors them all)."""
        from eosflow.sinks.iceberg.commit import in_range

        def count(r) -> int:
            rows = table.scan(row_filter=in_range(r), selected_fields=("kafka_offset",)).to_arrow().num_rows
            (rejected,) = one_row(
                conn.execute(
                    "select count(*) from eosflow.rejected where pipeline = %s and kafka_topic = %s "
                    "and kafka_partition = %s and kafka_offset >= %s and kafka_offset < %s",
                    (run.pipeline.name, r.topic, r.partition, r.start, r.end),
                )
            )
            return rows + rejected

        return count

    def refuse_backfill(self, pipeline: Pipeline, mode: str) -> None:
        """A state table keeps no changelog: a replay has nothing to rebuild a range's state from."""
        if mode == BackfillMode.REPLAY and pipeline.schema.changes is not None:
            from eosflow.ledger.backfill import BackfillError

            raise BackfillError(
                f"pipeline {pipeline.name!r} keeps a change stream's state in Iceberg table "
                f"{self.iceberg_table}, which holds each key's last change and no changelog: a replay has "
                "no history to rebuild a range's rows from, so it is refused. Nothing was planned. Catch-up "
                "backfills are fine; to re-derive the state, point a new pipeline at a new table and "
                "read the topic from its start"
            )

    def commit(self, conn: psycopg.Connection, run: Run, written: object):
        from eosflow.ledger import mirror

        assert isinstance(written, dict)
        fault_point("in_commit")  # committed in the table, not yet mirrored in the ledger
        files, io = written["rejected_files"], written["io_properties"]
        with run.time("ledger mirror"):
            if run.plan.kind == "replay":
                return mirror.mirror_replay(
                    conn, run.plan, written["outcomes"], self._where, _rejected_rows({}, files, io)
                )
            also = _rejected_rows(files, {}, io)
            return mirror.mirror(conn, run.plan, written["outcomes"], self._where, also)

    # --- after a run

    def compact(self, conn: psycopg.Connection, pipeline: Pipeline, target_rows: int | None, log: Log):
        """Small files merged per day, old snapshots expired, unreferenced files removed (maintenance.py)."""
        from eosflow.settings import load
        from eosflow.sinks.iceberg import maintenance
        from eosflow.sinks.iceberg.catalog import load as load_table

        return maintenance.compact(load_table(load(), self.iceberg_table), target_rows)

    def verify(self, settings: Settings, pipeline: Pipeline, marts: bool) -> Verdict:
        if pipeline.schema.changes is not None:
            from eosflow.sinks.iceberg.verify_state import verify_state_table

            return verify_state_table(settings, pipeline, self.iceberg_table, self.deletes is Deletes.SOFT)
        from eosflow.sinks.iceberg.verify import verify_iceberg_sink

        return verify_iceberg_sink(settings, pipeline, self.iceberg_table)


def _rejected_rows(
    files: Mapping[tuple[str, int], list[str]],
    replayed: Mapping[tuple[str, int], list[str]],
    io_properties: Mapping[str, str],
):
    """The ledger mirror's `also`: each mirrored range's rejected rows, from its files (a commit's, or a
    replay's), into eosflow.rejected (in the mirror's transaction); a replay's replace the range's."""

    def insert(conn: psycopg.Connection, plan, parts) -> None:
        import pyarrow.parquet as pq

        from eosflow.sinks.iceberg import storage
        from eosflow.transform import REJECTED_COLUMNS

        names = [n for n, _ in REJECTED_COLUMNS]
        for part in parts:
            r = part.range
            if plan.kind == "replay":
                conn.execute(
                    "delete from eosflow.rejected where pipeline = %s and kafka_topic = %s "
                    "and kafka_partition = %s and kafka_offset >= %s and kafka_offset < %s",
                    (plan.pipeline, r.topic, r.partition, r.start, r.end),
                )
            chosen = replayed if plan.kind == "replay" else files
            for uri in chosen.get((r.topic, r.partition), []):
                filesystem, path = storage.filesystem(io_properties, uri)
                rows = pq.read_table(path, filesystem=filesystem).select(names).to_pylist()
                with conn.cursor().copy(f"copy eosflow.rejected ({', '.join(names)}) from stdin") as copy:
                    for row in rows:
                        copy.write_row([row[n] for n in names])

    return insert
