"""The lab's world: its own stack, one pipeline per trial, real job processes, and the measuring.

The lab runs on a stack of its own (state under .stack/lab, ports 100 above the dev stack's), so
restarting its broker or its Postgres never disturbs yours. Every trial gets a fresh topic, target
table and pipeline, so trials cannot see each other's records.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import yaml

from eosflow import names, pipelines
from eosflow.kafka_admin import ensure_topic
from eosflow_dev.lab import changes
from eosflow_dev.lab.outcome import Tally, tally
from eosflow_dev.produce import events
from eosflow_dev.produce.manifest import Manifest
from eosflow_dev.produce.producer import Delivery, EventProducer, produce_stream
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.settings import StackSettings

Log = Callable[[str], None]

# Dev-stack ports + 100; the proxy ports are the broker's extra listener behind toxiproxy.
LAB_ENV = {
    "EOSFLOW_KAFKA_PORT": "19192",
    "EOSFLOW_KAFKA_CONTROLLER_PORT": "19193",
    "EOSFLOW_KAFKA_PROXIED_PORT": "19194",
    "EOSFLOW_KAFKA_PROXY_PORT": "19195",
    "EOSFLOW_TOXIPROXY_PORT": "19196",
    "EOSFLOW_KAFKA_SASL_PORT": "0",  # no SASL listener: the lab's clients never log in
    "EOSFLOW_PG_PORT": "15532",
    "EOSFLOW_REGISTRY_PORT": "0",  # no schema registry: the lab's pipelines are JSON
    "EOSFLOW_SPARK_CONNECT_PORT": "15102",  # started by the spark-connect-kill scenario only
}
CLUSTER_BASE_PORT = 19200  # the three-broker cluster: 19200-19205
# A Kafka sink's modes: the same delivery modes, the output a topic instead of a table.
KAFKA_MODES = {"kafka_exactly_once": "exactly_once", "kafka_at_least_once": "at_least_once"}
# An Iceberg sink: one Iceberg commit per run, the positions in the table (no comparison mode).
ICEBERG_MODES = {"iceberg_exactly_once": "exactly_once"}
# `eosflow publish`: an outbox into Kafka, exactly once or (for comparison) at least once.
PUBLISH_MODES = {"publish_exactly_once": "exactly_once", "publish_at_least_once": "at_least_once"}
# `eosflow stream`: micro-batches into the warehouse, exactly once (its comparison is the batch modes').
STREAM_MODES = {"stream_exactly_once": "exactly_once"}
# A Debezium change stream into the warehouse: a changelog and a state table, under each delivery mode.
CHANGE_MODES = {
    "changes_exactly_once": "exactly_once",
    "changes_at_least_once": "at_least_once",
    "changes_at_most_once": "at_most_once",
}
LAB_MODES = (
    *pipelines.DELIVERY_MODES, *KAFKA_MODES, *ICEBERG_MODES, *PUBLISH_MODES, *STREAM_MODES, *CHANGE_MODES
)  # fmt: skip
MODE_TAGS = {
    "exactly_once": "eo",
    "at_least_once": "alo",
    "at_most_once": "amo",
    "kafka_exactly_once": "keo",
    "kafka_at_least_once": "kalo",
    "iceberg_exactly_once": "ieo",
    "publish_exactly_once": "peo",
    "publish_at_least_once": "palo",
    "stream_exactly_once": "seo",
    "changes_exactly_once": "ceo",
    "changes_at_least_once": "calo",
    "changes_at_most_once": "camo",
}


def lab_settings(state_dir: Path | None = None) -> StackSettings:
    """StackSettings of the lab stack; the environment is set too, so every child process agrees."""
    base = settings_mod.load()
    os.environ.update(LAB_ENV)
    # Connections inherited from a developer's shell (or the test suite) point at the dev stack;
    # the lab's Airflow must get the ones made from the lab's settings.
    for name in ("AIRFLOW_CONN_WAREHOUSE", "AIRFLOW_CONN_KAFKA_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT"):
        os.environ.pop(name, None)
    os.environ["EOSFLOW_STATE_DIR"] = str(state_dir or base.state_dir / "lab")
    return settings_mod.load()


@dataclass(frozen=True)
class LabPipeline:
    name: str
    topic: str
    table: str
    mode: str

    @property
    def writes_to_kafka(self) -> bool:
        return self.mode in KAFKA_MODES

    @property
    def writes_to_iceberg(self) -> bool:
        return self.mode in ICEBERG_MODES

    @property
    def output_topic(self) -> str:
        return f"{self.topic}.out"

    @property
    def changes(self) -> bool:
        """A change stream: `table` is its changelog, `state_table` the replica."""
        return self.mode in CHANGE_MODES

    @property
    def state_table(self) -> str:
        return f"lab_replica.{self.name}"


@dataclass(frozen=True)
class JobResult:
    returncode: int
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -9

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.stderr.strip().splitlines()[-lines:])


class Lab:
    def __init__(
        self, settings: StackSettings, home: Path, seed: int, records: int, log: Log = print
    ) -> None:
        self.settings = settings
        self.home = home
        self.seed = seed
        self.records = records
        self.log = log
        self.pipelines_file = home / "pipelines.yml"
        self._declared: dict[str, dict] = {}
        self.publishers: dict[str, dict] = {}  # eosflow_dev.lab.publisher_faults declares its publishers here
        home.mkdir(parents=True, exist_ok=True)

    def write_declarations(self) -> None:
        body = {"pipelines": self._declared, "publishers": self.publishers}
        self.pipelines_file.write_text(yaml.safe_dump(body, sort_keys=True))

    # -- pipelines ------------------------------------------------------------------------------------
    def pipeline(self, scenario: str, mode: str, trial: int) -> LabPipeline:
        """A fresh pipeline (topic, table) for one trial, declared in the lab's pipelines file."""
        name = names.fitted(f"lab_{scenario}_{MODE_TAGS[mode]}_{trial}_{time.time_ns() % 10**8:08d}")
        p = LabPipeline(name, f"lab.{name}", f"lab.{name}", mode)
        declared = pipelines.declaration(self.settings.root / "pipelines.yml", "orders")
        if p.changes:
            declared = {
                "format": "json",
                "columns": changes.COLUMNS,
                "changes": "debezium",
                "primary_key": ["id"],
            }
        if p.writes_to_kafka:
            sink = {"sink": "kafka", "output_topic": p.output_topic, "delivery": KAFKA_MODES[mode]}
        elif p.writes_to_iceberg:
            sink = {"sink": "iceberg", "table": p.table}  # lab.<name> in the Iceberg catalog
        elif p.changes:
            sink = {"target_table": p.table, "state_table": p.state_table, "delivery": CHANGE_MODES[mode]}
        else:
            sink = {"target_table": p.table, "delivery": STREAM_MODES.get(mode, mode)}
        self._declared[name] = {
            "topics": [p.topic],
            **declared,
            "transform_version": "v1",
            "initial_offset": "earliest",
            "max_records_per_partition": 1_000_000,
            "max_value_bytes": 65_536,
            **sink,
        }
        self.write_declarations()
        return p

    def split_runs(self, p: LabPipeline, manifest: Manifest) -> int:
        """Make each run of `p` read at most half of its largest partition's offsets, so two runs read the
        topic: a change stream's second run then changes rows the first one committed. Returns the limit."""
        last = max((r.offset for r in manifest.rows if r.offset >= 0), default=0)
        limit = (last + 2 + 1) // 2  # the offsets up to the last transaction's marker, halved, rounded up
        self._declared[p.name]["max_records_per_partition"] = limit
        self.write_declarations()
        return limit

    # -- producing ----------------------------------------------------------------------------------------
    def produce(self, p: LabPipeline, seed: int, partitions: int = 3) -> Manifest:
        """Transactions of 50 with one in ten aborted: the realistic input, holes in offsets included."""
        ensure_topic(self.settings.bootstrap_servers, p.topic, partitions, log=lambda m: None)
        delivery = Delivery(transactional_id=f"{p.name}-tx", txn_size=50, abort_ratio=0.1)
        producer = EventProducer(self.settings.bootstrap_servers, p.topic, delivery, seed=seed)
        try:
            if p.changes:  # Debezium's changes of a customers table, and the source table they leave
                manifest = changes.produce(producer, self.records, seed)
            else:
                manifest = produce_stream(producer, events.generate(seed, self.records), seed)
        finally:
            producer.close()
        manifest.write(self.home / "manifests" / f"{p.name}.json")
        return manifest

    # -- the job ------------------------------------------------------------------------------------------
    def job_env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ, EOSFLOW_PIPELINES=str(self.pipelines_file), EOSFLOW_FAULT_DIR=str(self.home))
        for key in ("EOSFLOW_CRASH_AT", "EOSFLOW_PAUSE_AT"):
            env.pop(key, None)
        return env | extra

    def start_job(self, p: LabPipeline, run_id: str, **env: str) -> subprocess.Popen:
        """`eosflow ingest` in a process of its own, so a SIGKILL is a real one."""
        return subprocess.Popen(
            [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", p.name, "--run-id", run_id],
            env=self.job_env(**env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run_job(self, p: LabPipeline, run_id: str, timeout_s: float = 600, **env: str) -> JobResult:
        proc = self.start_job(p, run_id, **env)
        return self.finish(proc, timeout_s)

    @staticmethod
    def finish(proc: subprocess.Popen, timeout_s: float = 600) -> JobResult:
        _, err = proc.communicate(timeout=timeout_s)
        return JobResult(proc.returncode, err or "")

    def wait_paused(
        self, point: str, proc: subprocess.Popen, timeout_s: float = 300, log: Path | None = None
    ) -> None:
        """Until the job stands at `point`; `log`: where its stderr goes, if not to a pipe."""
        marker = self.home / f"{point}.paused"
        deadline = time.monotonic() + timeout_s
        while not marker.exists():
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:] if log else self.finish(proc).tail()
                raise RuntimeError(f"the job ended before pausing at {point}:\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the job did not reach {point} within {timeout_s:.0f}s")
            time.sleep(0.1)

    def resume(self, point: str) -> None:
        (self.home / f"{point}.resume").write_text("go\n")

    def clear_pause(self, point: str) -> None:
        for suffix in ("paused", "resume"):
            (self.home / f"{point}.{suffix}").unlink(missing_ok=True)

    # -- measuring -------------------------------------------------------------------------------------
    def measure(self, p: LabPipeline, manifest: Manifest) -> Tally:
        """Against the producer's manifest and the rows really in the table (or the records a
        read_committed consumer gets from the output topic), never the ledger."""
        if p.writes_to_kafka:
            return tally(manifest, topic_event_ids(self.settings.kafka, p.output_topic))
        if p.writes_to_iceberg:
            return tally(manifest, iceberg_event_ids(self.settings, p.table))
        if isinstance(manifest, changes.ChangeManifest):  # the changelog, a change's id its LSN
            with psycopg.connect(self.settings.warehouse_dsn) as conn:
                return tally(manifest.committed_changes(), changes.changelog_ids(conn, p.table))
        with psycopg.connect(self.settings.warehouse_dsn) as conn:
            exists = conn.execute("select to_regclass(%s) is not null", (p.table,)).fetchone()[0]
            ids = [str(r[0]) for r in conn.execute(f"select event_id from {p.table}")] if exists else []
        return tally(manifest, ids)

    def replica(self, p: LabPipeline, manifest: Manifest) -> changes.Replica | None:
        """A change stream's state table against the source table its committed changes describe (read
        with psycopg); None for a pipeline that keeps no replica."""
        if not isinstance(manifest, changes.ChangeManifest):
            return None
        with psycopg.connect(self.settings.warehouse_dsn) as conn:
            return changes.compare(manifest.source_table(), changes.read_state(conn, p.state_table))

    def invariants(self, p: LabPipeline) -> str:
        """dbt's verdict on the pipeline: I1-I6 as `eosflow verify` runs them (for a Kafka sink, its
        topics read back against the ledger; for a change stream, S1-S3 too)."""
        from eosflow.dbt_build import run_dbt

        if (
            p.writes_to_kafka or p.writes_to_iceberg or p.changes
        ):  # the sink's own verify (Iceberg: dbt's, by name)
            pipeline = pipelines.load(self.settings, p.name, self.pipelines_file)
            checked = pipeline.sink.verify(self.settings, pipeline, False)
            failed = sorted({getattr(c, "invariant", None) or c.name for c in checked.failed})
            return "pass" if checked.ok else "fail: " + ", ".join(failed)

        result = run_dbt(self.settings, p.name, p.table)
        if result.ok:
            return "pass"
        names = sorted({c.invariant or c.name for c in result.failed})
        return "fail: " + ", ".join(names) if names else f"error (dbt exit {result.returncode})"


def iceberg_event_ids(settings: StackSettings, table: str) -> list[str]:
    """The event_id of every row of the Iceberg table's current snapshot, by a PyIceberg scan."""
    from pyiceberg.exceptions import NoSuchTableError

    from eosflow.sinks.iceberg.catalog import catalog

    try:
        scan = catalog(settings).load_table(table).scan(selected_fields=("event_id",))
    except NoSuchTableError:
        return []
    return [str(e) for e in scan.to_arrow().column(0).to_pylist()]


def topic_event_ids(kafka, topic: str) -> list[str]:
    """The event_id of every record a read_committed consumer gets from `topic`, from its start."""
    import json

    from eosflow.sources.kafka.read_back import partitions_of, read_to_end

    starts = [(topic, p, -2) for p in partitions_of(kafka, topic)]
    return [str(json.loads(m.value())["event_id"]) for m in read_to_end(kafka, starts)]
