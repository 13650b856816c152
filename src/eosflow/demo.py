"""`eosflow demo`: the main job end to end on the local stack, and the round trip back through Kafka.

Produce a transactional order stream (some transactions aborted on purpose, a few malformed
records), run one exactly-once ingestion of the `orders` pipeline, then check the warehouse
against the producer's manifest, then `dbt build` checks the invariants I1-I6 and builds the marts.

The round trip (unless `--no-round-trip`): the publisher `orders_published` sends the mart of the
same name to the topic orders.published (rows and position in one Kafka transaction), the pipeline
`orders_roundtrip` ingests that topic into raw.orders_roundtrip, and the check finds every published
row there once, as it left (round_trip.py).
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from pathlib import Path

import psycopg
from confluent_kafka import Producer

from eosflow import pipelines, round_trip, stack
from eosflow.kafka_admin import ensure_topic
from eosflow.ledger import store
from eosflow.ledger.positions import PartitionCounts
from eosflow.produce import events
from eosflow.produce.producer import Delivery, EventProducer, produce_stream
from eosflow.publishers import load_publisher
from eosflow.runners.summary import RunSummary
from eosflow.settings import Settings
from eosflow.stack import airflow_local
from eosflow.verify import verify_pipeline

PIPELINE = "orders"
DAG_ID = f"eosflow_ingest_{PIPELINE}"
PUBLISHER, ROUND_TRIP = "orders_published", "orders_roundtrip"  # declared in pipelines.yml
PARTITIONS = 6
COUNT = 20_000
MALFORMED = [b"not json at all", b'{"event_id": "missing everything else"}', None]


def run(settings: Settings, log=print, round_trip_too: bool = True) -> int:
    stack.up(settings, log=log)
    pipeline = pipelines.load(settings, PIPELINE)
    seed = secrets.randbits(31)
    ensure_topic(settings.kafka, pipeline.topic, PARTITIONS, log=log)

    delivery = Delivery(transactional_id=f"eosflow-demo-{seed}", txn_size=200, abort_ratio=0.2)
    steps = 6 if round_trip_too else 3
    log(
        f"1/{steps} producing {COUNT:,} events to {pipeline.topic}: transactions of {delivery.txn_size}, "
        f"{delivery.abort_ratio:.0%} aborted on purpose, plus {len(MALFORMED)} malformed records"
    )
    producer = EventProducer(settings.kafka, pipeline.topic, delivery, seed=seed)
    manifest = produce_stream(producer, events.generate(seed, COUNT), seed)
    manifest.write(settings.state_dir / "manifests" / f"demo-{seed}.json")
    _produce_malformed(settings, pipeline.topic)

    log(
        f"2/{steps} running the Airflow DAG {DAG_ID} end to end "
        "(airflow dags test: plan, Spark, verify, announce)"
    )
    run_id = _run_dag(settings, DAG_ID, log)
    if run_id is None or not _show_run(settings, PIPELINE, run_id, log):
        return 1

    log(f"3/{steps} checking the warehouse against the producer's manifest, then dbt build (I1-I6, marts)")
    committed = [r.event_id for r in manifest.rows if r.status == "committed"]
    aborted = [r.event_id for r in manifest.rows if r.status == "aborted"]
    with psycopg.connect(settings.warehouse_dsn) as conn:
        found = _count_ids(conn, pipeline.target_table, committed)
        leaked = _count_ids(conn, pipeline.target_table, aborted)
    print(f"  committed by the producer: {len(committed):>7,}   in {pipeline.target_table}: {found:>7,}")
    print(f"  aborted by the producer:   {len(aborted):>7,}   in {pipeline.target_table}: {leaked:>7,}")
    checked = verify_pipeline(settings, PIPELINE)  # dbt build: invariants I1-I6, then the marts
    print("\n" + "\n".join("  " + line for line in checked.table().splitlines()))
    ok = found == len(committed) and leaked == 0 and checked.ok
    print(
        f"\n  verdict: {'EXACTLY ONCE: every committed event once, no aborted event' if ok else 'MISMATCH'}\n"
    )
    if not ok or not round_trip_too:
        return 0 if ok else 1
    return _round_trip(settings, log)


def _round_trip(settings: Settings, log) -> int:
    publisher, pipeline = load_publisher(settings, PUBLISHER), pipelines.load(settings, ROUND_TRIP)
    publish_dag, ingest_dag = f"eosflow_publish_{PUBLISHER}", f"eosflow_ingest_{ROUND_TRIP}"
    log(
        f"4/6 publishing {publisher.table} to {publisher.topic} with the DAG {publish_dag} (rows and "
        "position in one Kafka transaction per batch)"
    )
    if _run_dag(settings, publish_dag, log) is None:
        return 1
    log(f"5/6 ingesting {publisher.topic} into {pipeline.target_table} with the DAG {ingest_dag}")
    run_id = _run_dag(settings, ingest_dag, log)
    if run_id is None or not _show_run(settings, ROUND_TRIP, run_id, log):
        return 1
    log(f"6/6 checking the round trip: {publisher.table} -> {publisher.topic} -> {pipeline.target_table}")
    result = round_trip.check(settings, publisher, pipeline)
    print("\n" + "\n".join("  " + line for line in result.table().splitlines()))
    verdict = "ROUND TRIP EXACTLY ONCE: every published row arrived once, as it left"
    print(f"\n  verdict: {verdict if result.ok else 'ROUND TRIP MISMATCH'}\n")
    return 0 if result.ok else 1


def _show_run(settings: Settings, pipeline: str, run_id: str, log) -> bool:
    """Print the run's summary from the warehouse, as `eosflow ingest` prints it."""
    batch = f"{pipeline}:{run_id}"
    with psycopg.connect(settings.warehouse_dsn) as conn:
        found = store.load_plan(conn, batch)
        counts = store.committed_counts(conn, batch)
    if found is None:
        log("the DAG succeeded but no plan of this run is in the warehouse; see the Airflow log")
        return False
    plan, status = found
    summary = RunSummary(pipeline, batch, status, plan, {k: PartitionCounts(*v) for k, v in counts.items()})
    print("\n" + summary.table() + "\n")
    return True


def _run_dag(settings: Settings, dag_id: str, log) -> str | None:
    """`airflow dags test` of the ingest DAG; returns the run id if it succeeded.

    Its full output (every task log) goes to a file, so the console keeps the summary readable.
    """
    airflow = str(Path(sys.executable).parent / "airflow")
    env = airflow_local.airflow_env(settings)
    log_path = settings.state_dir / f"demo-airflow-{dag_id}.log"
    settings.airflow_home.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as out:
        for cmd in ([airflow, "db", "migrate"], [airflow, "dags", "test", dag_id]):
            done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
            if done.returncode != 0:
                log(f"`airflow {' '.join(cmd[1:])}` failed (exit {done.returncode}); task logs: {log_path}")
                return None
    finished = re.findall(
        r"DagRun Finished: dag_id=\S+, .*?run_id=([^,\s]+),.*?state=(\w+)",
        log_path.read_text(errors="replace"),
    )
    if not finished or finished[-1][1] != "success":
        state = finished[-1][1] if finished else "no result"
        log(f"the DAG run did not succeed ({state}); task logs: {log_path}")
        return None
    log(f"DAG run {finished[-1][0]} succeeded (task logs: {log_path})")
    return finished[-1][0]


def _produce_malformed(settings: Settings, topic: str) -> None:
    producer = Producer({**settings.kafka, "enable.idempotence": True})
    for value in MALFORMED:
        producer.produce(topic, value=value, key=b"demo-malformed")
    producer.flush(10)


def _count_ids(conn: psycopg.Connection, table: str, ids: list[str]) -> int:
    (n,) = conn.execute(f"select count(*) from {table} where event_id = any(%s::uuid[])", (ids,)).fetchone()
    return n
