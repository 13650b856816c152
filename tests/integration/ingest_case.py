"""A pipeline of its own for one test: its topic, target table and pipelines file, plus helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import yaml

from eosflow import pipelines
from eosflow.kafka_admin import ensure_topic
from eosflow.ledger.ranges import OffsetRange
from eosflow.runners import backfill_run, job
from eosflow.settings import Settings
from eosflow.sinks.postgres import invariants
from eosflow_dev.produce import events
from eosflow_dev.produce.manifest import Manifest
from eosflow_dev.produce.producer import Delivery, EventProducer, produce_stream
from tests import orders


@dataclass
class IngestCase:
    settings: Settings
    config_path: Path
    name: str = field(default_factory=lambda: f"t_{uuid.uuid4().hex[:10]}")
    spec: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.spec = {
            "topics": [f"ingest.{self.name}"],
            "target_table": f"raw.{self.name}",
            **orders.declaration(),
            "transform_version": "v1",
            "initial_offset": "earliest",
            "max_records_per_partition": 100_000,
            "max_value_bytes": 4096,
        } | self.spec
        self.write_config()

    # -- set-up -------------------------------------------------------------------------------------
    def write_config(self, **changes) -> None:
        self.spec |= changes
        self.config_path.write_text(yaml.safe_dump({"pipelines": {self.name: self.spec}}))

    def as_kafka_sink(self, **extra) -> None:
        """The same pipeline with `sink: kafka`, writing to out.<name> (and out.<name>.rejected)."""
        self.spec.pop("target_table", None)
        self.write_config(sink="kafka", output_topic=f"out.{self.name}", **extra)

    @property
    def output_topic(self) -> str:
        return self.spec["output_topic"]

    @property
    def topic(self) -> str:
        return self.spec["topics"][0]

    @property
    def table(self) -> str:
        return self.spec["target_table"]

    @property
    def pipeline(self) -> pipelines.Pipeline:
        return pipelines.load(self.settings, self.name, self.config_path)

    def env(self, **extra: str) -> dict[str, str]:
        return dict(os.environ, EOSFLOW_PIPELINES=str(self.config_path), **extra)

    def create_topic(self, partitions: int, config: dict[str, str] | None = None) -> None:
        ensure_topic(
            self.settings.bootstrap_servers, self.topic, partitions, config=config, log=lambda m: None
        )

    def produce(self, count: int, seed: int, partitions: int = 3, **delivery) -> Manifest:
        self.create_topic(partitions)
        d = Delivery(**delivery) if delivery else Delivery()
        producer = EventProducer(self.settings.bootstrap_servers, self.topic, d, seed=seed)
        return produce_stream(producer, events.generate(seed, count), seed)

    # -- running ------------------------------------------------------------------------------------
    def ingest(self, run_id: str | None = None, **kw) -> job.RunSummary:
        return job.run(self.settings, self.name, run_id, log=lambda m: None, **kw)

    def replay_all(self) -> None:
        """A replay of everything the target holds, a chunk per partition from offset 0 (a backfill's
        replay chunks, as `eosflow backfill --mode replay` runs them); each must commit."""
        ends = self.query(f"select kafka_partition, max(kafka_offset) + 1 from {self.table} group by 1")
        for partition, end in ends:
            chunk = OffsetRange(self.topic, partition, 0, end)
            replay = backfill_run.run_chunk(
                self.settings, self.name, f"replay-{partition}", chunk, "replay", log=lambda m: None
            )
            assert replay.outcome == "committed", replay

    def ingest_process(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        """`eosflow ingest` in a process of its own, as an operator (or a crash test) runs it."""
        return subprocess.run(
            [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", self.name, *args],
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def raced_while_paused(self, point: str, folder: Path) -> subprocess.CompletedProcess:
        """A run (run id "zombie") paused at fault point `point` while a newer run commits the same
        offsets; then resumed. Returns how the paused run ended (the newer run must have committed)."""
        import time

        env = self.env(EOSFLOW_PAUSE_AT=point, EOSFLOW_FAULT_DIR=str(folder))
        cmd = [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", self.name, "--run-id", "zombie"]
        zombie = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while not (folder / f"{point}.paused").exists():
            assert zombie.poll() is None and time.monotonic() < deadline, "the zombie never reached its pause"
            time.sleep(0.2)
        newer = self.ingest_process("--run-id", "newer")
        assert newer.returncode == 0, newer.stderr[-3000:]
        (folder / f"{point}.resume").write_text("go")
        out, err = zombie.communicate(timeout=300)
        return subprocess.CompletedProcess(cmd, zombie.returncode, out, err)

    # -- looking at the warehouse ---------------------------------------------------------------------
    def query(self, sql: str, *params) -> list[tuple]:
        with psycopg.connect(self.settings.warehouse_dsn) as conn:
            return conn.execute(sql, params).fetchall()

    def column_types(self) -> dict[str, str]:
        """The target's columns and their types as Postgres prints them (format_type)."""
        return dict(
            self.query(
                "select attname, format_type(atttypid, atttypmod) from pg_attribute "
                "where attrelid = %s::regclass and attnum > 0 and not attisdropped",
                self.table,
            )
        )

    def event_ids(self) -> list[str]:
        return [str(r[0]) for r in self.query(f"select event_id from {self.table}")]

    def rejected(self) -> list[tuple]:
        return self.query(
            "select kafka_partition, kafka_offset, error, raw_value from eosflow.rejected "
            "where pipeline = %s order by 1, 2",
            self.name,
        )

    def ledger(self) -> list[tuple]:
        return self.query(
            "select partition, start_offset, end_offset, kind, records_read, rows_written, "
            "rows_rejected from eosflow.ledger where pipeline = %s order by 1, 2",
            self.name,
        )

    def violations(self) -> list[invariants.Violation]:
        with psycopg.connect(self.settings.warehouse_dsn) as conn:
            return invariants.check(conn, self.pipeline)
