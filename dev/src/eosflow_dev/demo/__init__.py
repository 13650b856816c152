"""`eosflow demo`: the main job end to end on the local stack, and the round trip back through Kafka.

Produce a transactional order stream (some transactions aborted on purpose, a few malformed
records), run one exactly-once ingestion of the `orders` pipeline, then check the warehouse
against the producer's manifest, then `dbt build` checks the invariants I1-I6 and builds the marts.

The round trip (unless `--no-round-trip`): the publisher `orders_published` sends the mart of the
same name to the topic orders.published (rows and position in one Kafka transaction), the pipeline
`orders_roundtrip` ingests that topic into raw.orders_roundtrip, and the check finds every published
row there once, as it left (round_trip.py).

The replication (unless `--no-replication` or `--no-round-trip`): Debezium streams a source table that a
writer keeps changing while the DAG of the pipeline `customers` runs, and the verdict compares the source
table with its replica row for row (replication.py).
"""

from __future__ import annotations

import secrets
from concurrent.futures import Future, ThreadPoolExecutor

import psycopg
from confluent_kafka import Producer

from eosflow import pipelines, round_trip
from eosflow.kafka_admin import ensure_topic
from eosflow.ledger import store
from eosflow.ledger.positions import PartitionCounts
from eosflow.publish.declaration import load_publisher
from eosflow.runners.summary import RunSummary
from eosflow.verify import verify_pipeline
from eosflow_dev import stack
from eosflow_dev.demo import replication
from eosflow_dev.demo.dag_runs import DagRuns
from eosflow_dev.produce import events
from eosflow_dev.produce.producer import Delivery, EventProducer, produce_stream
from eosflow_dev.stack.settings import StackSettings

PIPELINE = "orders"
DAG_ID = f"eosflow_ingest_{PIPELINE}"
PUBLISHER, ROUND_TRIP = "orders_published", "orders_roundtrip"  # declared in pipelines.yml
PARTITIONS = 6
COUNT = 20_000
MALFORMED = [b"not json at all", b'{"event_id": "missing everything else"}', None]


def run(settings: StackSettings, log=print, round_trip_too: bool = True, replication_too: bool = True) -> int:
    stack.up(settings, log=log)
    run_dag = DagRuns(settings, log)
    run_dag.start()  # Airflow's database migrated meanwhile: on a fresh clone, the whole database is made
    replication_too = replication_too and round_trip_too
    background = ThreadPoolExecutor(1, thread_name_prefix="demo-replication")
    # Meanwhile too: Kafka Connect's start and Debezium's snapshot, mostly waiting on a JVM and the broker.
    ready = background.submit(replication.prepare, settings) if replication_too else None
    try:
        return _run(settings, log, run_dag, round_trip_too, ready)
    finally:
        run_dag.close()
        background.shutdown(wait=True)


def _run(
    settings: StackSettings,
    log,
    run_dag: DagRuns,
    round_trip_too: bool,
    ready: Future[replication.Prepared] | None,
) -> int:
    pipeline = pipelines.load(settings, PIPELINE)
    seed = secrets.randbits(31)
    ensure_topic(settings.kafka, pipeline.topic, PARTITIONS, log=log)

    delivery = Delivery(transactional_id=f"eosflow-demo-{seed}", txn_size=200, abort_ratio=0.2)
    steps = 3 + 3 * round_trip_too + (ready is not None)
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
    run_id = run_dag(DAG_ID)
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
    if _round_trip(settings, run_dag, log, steps) != 0:
        return 1
    if ready is None:
        return 0
    replicated = replication.run(settings, f"{steps}/{steps}", ready.result(), run_dag, log)
    return 0 if replicated else 1


def _round_trip(settings: StackSettings, run_dag: DagRuns, log, steps: int) -> int:
    publisher, pipeline = load_publisher(settings, PUBLISHER), pipelines.load(settings, ROUND_TRIP)
    publish_dag, ingest_dag = f"eosflow_publish_{PUBLISHER}", f"eosflow_ingest_{ROUND_TRIP}"
    log(
        f"4/{steps} publishing {publisher.table} to {publisher.topic} with the DAG {publish_dag} (rows and "
        "position in one Kafka transaction per batch)"
    )
    if run_dag(publish_dag) is None:
        return 1
    log(f"5/{steps} ingesting {publisher.topic} into {pipeline.target_table} with the DAG {ingest_dag}")
    run_id = run_dag(ingest_dag)
    if run_id is None or not _show_run(settings, ROUND_TRIP, run_id, log):
        return 1
    route = f"{publisher.table} -> {publisher.topic} -> {pipeline.target_table}"
    log(f"6/{steps} checking the round trip: {route}")
    result = round_trip.check(settings, publisher, pipeline)
    print("\n" + "\n".join("  " + line for line in result.table().splitlines()))
    verdict = "ROUND TRIP EXACTLY ONCE: every published row arrived once, as it left"
    print(f"\n  verdict: {verdict if result.ok else 'ROUND TRIP MISMATCH'}\n")
    return 0 if result.ok else 1


def _show_run(settings: StackSettings, pipeline: str, run_id: str, log) -> bool:
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


def _produce_malformed(settings: StackSettings, topic: str) -> None:
    producer = Producer({**settings.kafka, "enable.idempotence": True})
    for value in MALFORMED:
        producer.produce(topic, value=value, key=b"demo-malformed")
    producer.flush(10)


def _count_ids(conn: psycopg.Connection, table: str, ids: list[str]) -> int:
    (n,) = conn.execute(f"select count(*) from {table} where event_id = any(%s::uuid[])", (ids,)).fetchone()
    return n
