"""`eosflow bench --kafka-sink`: Kafka to Kafka exactly once, against Kafka's own tools on the same records.

One topic is loaded (transactional, as the main bench loads it); then, each in a process of its own:
ConsumerPerformance reads it (read_committed), ProducerPerformance writes as many records of the same
average size with an idempotent transactional producer (acks=all), and `eosflow ingest` moves it
through a `sink: kafka` pipeline into an output topic. The output is then read back by
`eosflow verify`'s Kafka check: every record exactly once, or the measurement does not count.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from eosflow import names, pipelines
from eosflow_dev.bench import ceilings, eosflow_run, load
from eosflow_dev.bench.measure import MeasurementFailed, run_measured
from eosflow_dev.runtime import jars, prereqs
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.settings import StackSettings

Log = Callable[[str], None]
_SENT = re.compile(r"(?P<n>\d+) records sent, (?P<rate>[\d.]+) records/sec")


@dataclass(frozen=True)
class Timed:
    name: str
    records: int
    seconds: float
    peak_rss_mib: float
    timed: str

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def producer_performance_cmd(
    settings: StackSettings, topic: str, records: int, record_size: int
) -> list[str]:
    return [
        prereqs.java(),
        "-Xmx512M",
        "-cp",
        jars.classpath(settings, "kafka"),
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(record_size),
        "--throughput",
        "-1",
        "--transactional-id",
        f"bench-pp-{topic}",
        "--transaction-duration-ms",
        "3000",
        "--producer-props",
        f"bootstrap.servers={settings.bootstrap_servers}",
        "acks=all",
        "enable.idempotence=true",
    ]


def run(
    settings: StackSettings, run_id: str, partitions: int, records: int, seed: int, work: Path, log: Log
) -> list[Timed]:
    topic = f"bench.{run_id}_k2k_p{partitions}_n{records}"
    workload = load.load_topic(settings, topic, partitions, records, seed, None, log)
    size = max(workload.payload_bytes // max(records, 1), 1)
    logs = work / "logs"
    timed: list[Timed] = []

    cmd = ceilings.consumer_performance_cmd(settings, topic, records, f"bench-cp-{topic}")
    measured = run_measured("read ceiling", cmd, logs / f"{topic}.read.log", log)
    stats = ceilings.parse_consumer_performance(measured.stdout)
    timed.append(
        Timed(
            "ConsumerPerformance (read_committed)",
            int(stats["records"]),
            stats["fetch_s"],
            measured.rss.total_mb,
            "fetching, as the tool reports it",
        )
    )

    scratch = f"{topic}.pp"
    from eosflow.kafka_admin import ensure_topic

    ensure_topic(settings.bootstrap_servers, scratch, partitions, log=lambda m: None)
    measured = run_measured(
        "produce ceiling",
        producer_performance_cmd(settings, scratch, records, size),
        logs / f"{topic}.produce.log",
        log,
    )
    sent = [m for m in _SENT.finditer(measured.stdout)]
    if not sent:
        raise MeasurementFailed(f"ProducerPerformance printed no summary; see {measured.log_path}")
    n, rate = int(sent[-1]["n"]), float(sent[-1]["rate"])
    timed.append(
        Timed(
            f"ProducerPerformance (acks=all, idempotent, transactional, {size} B)",
            n,
            n / rate,
            measured.rss.total_mb,
            "the tool's own records/s over its whole send",
        )
    )

    name = names.fitted(f"bench_k2k_{run_id}_p{partitions}_n{records}")
    config = work / f"{name}.pipelines.yml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        yaml.safe_dump(
            {
                "pipelines": {
                    name: {
                        "topics": [topic],
                        **pipelines.declaration(settings_mod.load().root / "pipelines.yml", "orders"),
                        "sink": "kafka",
                        "output_topic": f"{topic}.out",
                        "initial_offset": "earliest",
                        "max_records_per_partition": 2 * records,
                    }
                }
            },
            sort_keys=False,
        )
    )
    measured = run_measured(
        f"eosflow, Kafka sink ({records:,} records)",
        eosflow_run.ingest_cmd(name),
        logs / f"{topic}.eosflow.log",
        log,
        env=eosflow_run.ingest_env(config),
    )
    summary = eosflow_run.parse_summary(measured.stdout)
    if summary.outcome not in eosflow_run.OUTCOME_OK:
        raise MeasurementFailed(f"eosflow ingest ended {summary.outcome}; see {measured.log_path}")
    from eosflow.sinks.kafka.verify import verify_kafka_sink

    checked = verify_kafka_sink(settings, pipelines.load(settings, name, config))
    if not checked.ok:
        raise MeasurementFailed("the output is not every record exactly once:\n" + checked.table())
    log(checked.table())
    pass_s = summary.phases.get("read+transform+produce", 0.0)
    timed.append(
        Timed(
            "eosflow, sink: kafka (exactly once, checked)",
            summary.written,
            measured.wall_s,
            measured.rss.total_mb,
            "the `eosflow ingest` process, start to exit (Spark start included)",
        )
    )
    timed.append(
        Timed(
            "eosflow, its one pass only",
            summary.written,
            pass_s,
            measured.rss.total_mb,
            "its read+transform+produce phase: every task's read, checks, produce and Kafka commit",
        )
    )
    return timed


def markdown(timed: list[Timed], header: str) -> str:
    read, produce, eos, one_pass = timed
    serial = 1 / (1 / read.rate + 1 / produce.rate)  # read everything, then write everything
    lines = [
        header,
        "",
        "| measurement | records | s | records/s | peak RSS MiB | timed |",
        "|---|---:|---:|---:|---:|---|",
        *(
            f"| {t.name} | {t.records:,} | {t.seconds:.2f} | {t.rate:,.0f} | {t.peak_rss_mib:,.0f} "
            f"| {t.timed} |"
            for t in timed
        ),
        "",
        "| ratio (records/s) | |",
        "|---|---:|",
        f"| eosflow ÷ ConsumerPerformance | {eos.rate / read.rate:.2f} |",
        f"| eosflow ÷ ProducerPerformance | {eos.rate / produce.rate:.2f} |",
        f"| eosflow ÷ the two in series (read all, then write all: {serial:,.0f} records/s) "
        f"| {eos.rate / serial:.2f} |",
        f"| eosflow's one pass ÷ the two in series | {one_pass.rate / serial:.2f} |",
    ]
    return "\n".join(lines) + "\n"
