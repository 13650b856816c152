"""The randomized schedule for a `sink: iceberg` pipeline (issue 28): the batch machine's steps, the table's
truth.

The machine is tests/random/machine.py's, with the pipeline writing to an Iceberg table instead of a
Postgres one. What the sink holds is read back by a PyIceberg scan of the table's current snapshot (not
eosflow's write path), the rejected rows from eosflow.rejected (the ledger mirror copies them there), and
compared with the same producer-side model. Replays are the batch machine's (one Iceberg commit deletes the
range's rows and adds the re-read ones). Its own step: `eosflow compact` (files merged, snapshots expired,
unreferenced files removed) between any two steps, which must change no record and no position. At
quiescent points `eosflow verify` must pass too.
"""

from __future__ import annotations

from eosflow import pipelines as pipelines_mod
from tests.random.machine import ScheduleMachine, schedule_step
from tests.random.model import PipelineModel, Rows
from tests.random.world import read_rejected

ICEBERG = frozenset({"iceberg"})


class IcebergSinkMachine(ScheduleMachine):
    runner = "iceberg"
    mirrors = True  # its ledger mirrors the sink's truth (ScheduleMachine._settled_footprint)

    def declaration(self, pipe: PipelineModel) -> dict:
        spec = super().declaration(pipe)
        del spec["target_table"]
        return {**spec, "sink": "iceberg", "table": lake_table(pipe)}

    def rows(self, pipe: PipelineModel) -> Rows:
        from pyiceberg.exceptions import NoSuchTableError

        from eosflow.sinks.iceberg.catalog import catalog

        rejected = read_rejected(self.dsn, pipe.name)
        output: dict = {}
        try:
            table = catalog(self.settings).load_table(lake_table(pipe))
        except NoSuchTableError:
            return Rows(output, rejected)
        data = table.scan(selected_fields=("kafka_topic", "kafka_partition", "kafka_offset", "event_id"))
        for t, p, o, e in zip(*(c.to_pylist() for c in data.to_arrow().columns), strict=True):
            output.setdefault((t, p, o), []).append(None if e is None else str(e))
        return Rows(output, rejected)

    # in_commit: committed in the table (the truth), not yet mirrored in the ledger.
    committed_at = ("in_commit", "after_commit")

    def _invariants(self, pipe: PipelineModel) -> None:
        if not self.complete or pipe is not self.pipe:
            return  # verify wants every range settled: the model checks the rest after every step
        declared = pipelines_mod.load(self.settings, pipe.name, self.pipelines_file)
        verdict = declared.sink.verify(self.settings, declared, False)
        if not verdict.ok:
            self._violation(f"eosflow verify failed at a quiescent point:\n{verdict.table()}")

    # -- its own steps -----------------------------------------------------------------------------
    @schedule_step(1, runners=ICEBERG)
    def compact(self) -> None:
        """eosflow compact between two steps: the same records and positions afterwards."""
        import os
        from unittest import mock

        import psycopg

        self._begin("compact")
        before = self._settled_footprint()
        declared = pipelines_mod.load(self.settings, self.pipe.name, self.pipelines_file)
        # Expire all but the current snapshot and remove files older than about a second: for this
        # compact only (left in os.environ, it changed the compacts of later tests on this worker).
        ages = {"EOSFLOW_ICEBERG_SNAPSHOT_HOURS": "0", "EOSFLOW_ICEBERG_ORPHAN_HOURS": "0.0003"}
        try:
            with mock.patch.dict(os.environ, ages), psycopg.connect(self.dsn, autocommit=True) as conn:
                done = declared.sink.compact(conn, declared, 50, lambda m: None)
        except Exception as exc:  # noqa: BLE001 - no table yet is fine; anything else is a finding
            if "does not exist" in str(exc):
                self._outcome("no table yet")
                return
            self._violation(f"eosflow compact failed: {type(exc).__name__}: {exc}")
        self._fault("table compacted", done.merged_files)
        self._outcome("merged" if done.merged_files else "nothing to merge")
        self._unchanged(before, "compaction must change nothing")


def lake_table(pipe: PipelineModel) -> str:
    return f"lake.{pipe.name}"
