"""The DAGs run end to end in-process (dag.test) against the real stack, Spark via spark-submit."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration


def _states(run) -> dict[str, str]:
    return {
        ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""): str(ti.state)
        for ti in run.get_task_instances()
    }


def test_ingest_dag_lands_every_record_once_and_a_cleared_task_duplicates_nothing(case, airflow_db):
    from eosflow_airflow.dags import build_ingest_dag

    manifest = case.produce(800, seed=401, transactional_id=f"{case.name}-tx", abort_ratio=0.2, txn_size=50)
    run = build_ingest_dag(case.pipeline).test()
    assert str(run.state) == "success", _states(run)
    assert sorted(case.event_ids()) == sorted(r.event_id for r in manifest.visible())

    # A cleared Spark task re-runs with the same run id: it finds its commit and adds nothing.
    ledger = case.ledger()
    again = case.ingest_process("--run-id", run.run_id)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "ALREADY COMMITTED" in again.stdout
    assert len(case.event_ids()) == len(manifest.visible()) and case.ledger() == ledger


def test_ingest_dag_runs_a_kafka_sink_plan_spark_job_and_kafka_verify(case, airflow_db):
    from eosflow_airflow.dags import build_ingest_dag
    from tests.kafka_reader import read_all, sources

    case.as_kafka_sink()
    manifest = case.produce(400, seed=404, transactional_id=f"{case.name}-tx", abort_ratio=0.2, txn_size=50)
    run = build_ingest_dag(case.pipeline).test()
    assert str(run.state) == "success", _states(run)
    out = read_all(case.settings, case.output_topic)
    assert len(out) == len(manifest.visible()) and set(sources(out).values()) == {1}

    again = case.ingest_process("--run-id", run.run_id)  # a cleared Spark task: already committed
    assert again.returncode == 0, again.stderr[-2000:]
    assert "ALREADY COMMITTED" in again.stdout
    assert len(read_all(case.settings, case.output_topic)) == len(manifest.visible())


def test_publish_dag_publishes_the_outbox_once_and_a_second_run_adds_nothing(case, airflow_db):
    from collections import Counter

    import psycopg

    from eosflow_airflow.dags import build_publish_dag
    from tests import horizon
    from tests.outbox import Outbox

    outbox = Outbox(case)
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        outbox.insert(conn, 75)
    horizon.settle(case.settings.warehouse_dsn, outbox.publisher)
    dag = build_publish_dag(outbox.publisher)
    for _ in range(2):
        run = dag.test()
        assert str(run.state) == "success", _states(run)
    assert outbox.published_ids() == Counter(outbox.ids())


def test_backfill_dag_fails_fast_on_an_invalid_request(case, airflow_db):
    from eosflow_airflow.dags import build_backfill_dag

    case.produce(100, seed=402, partitions=1)
    case.ingest()
    dag = build_backfill_dag(case.pipeline)
    run = dag.test(
        run_conf={
            "mode": "replay",
            "partitions": "0",
            "from_offset": 50,
            "to_offset": 500,
        }
    )
    states = _states(run)
    assert str(run.state) == "failed"
    assert states["validate"] == "failed"
    assert not any(k.startswith("spark_chunk") and v == "success" for k, v in states.items())  # no Spark work


def test_a_backfill_dag_replays_its_own_pipeline_only_and_refuses_a_conf_naming_another(case, airflow_db):
    """Who may trigger eosflow_backfill_<pipeline> may replay that pipeline: a conf still naming a pipeline
    (as the single backfill DAG of earlier eosflow took it) must name the DAG's own."""
    from eosflow_airflow.dags import build_backfill_dag

    case.produce(100, seed=407, partitions=1)
    case.ingest()
    ledger = case.ledger()
    dag = build_backfill_dag(case.pipeline)
    assert dag.dag_id == f"eosflow_backfill_{case.name}" and "pipeline" not in dag.params
    conf = {"mode": "replay", "partitions": "0", "dry_run": True}
    run = dag.test(run_conf=conf | {"pipeline": "orders"})
    assert str(run.state) == "failed" and _states(run)["validate"] == "failed"
    run = dag.test(run_conf=conf | {"pipeline": case.name})  # its own: as if not named
    assert str(run.state) == "success", _states(run)
    assert case.ledger() == ledger


def test_backfill_dag_replays_a_range_in_chunks(case, airflow_db):
    from eosflow_airflow.dags import build_backfill_dag

    case.produce(300, seed=403, partitions=1)
    case.ingest()
    case.write_config(transform_version="v2")
    run = build_backfill_dag(case.pipeline).test(
        run_conf={
            "mode": "replay",
            "partitions": "0",
            "from_offset": 0,
            "to_offset": 200,
            "chunk_size": 100,
        }
    )
    assert str(run.state) == "success", _states(run)
    versions = dict(case.query(f"select transform_version, count(*) from {case.table} group by 1"))
    assert versions == {"v2": 200, "v1": 100}
    assert case.violations() == []


def test_compact_dag_merges_the_children_of_every_partitioned_target(case, airflow_db):
    import psycopg

    from eosflow.sinks.postgres import partitions
    from eosflow_airflow.dags import build_compact_dag

    case.produce(300, seed=403, partitions=1)
    for _ in range(3):
        case.ingest(max_records=100)
    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        assert len(partitions.children(conn, case.table)) == 3

    run = build_compact_dag().test()

    assert str(run.state) == "success", _states(run)
    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        assert len(partitions.children(conn, case.table)) == 1
    assert case.violations() == []


def test_compaction_goes_on_for_every_pipeline_while_another_is_refused(case, airflow_db):
    """A bad pipeline in pipelines.yml has no DAGs (eosflow_config_errors.py names it); it does not stop
    the hourly compaction of the others either."""
    import psycopg
    import yaml

    from eosflow.sinks.postgres import partitions
    from eosflow_airflow.dags import build_compact_dag

    case.produce(200, seed=408, partitions=1)
    for _ in range(2):
        case.ingest(max_records=100)
    broken = case.spec | {"target_table": "eosflow.ledger"}  # eosflow's own schema: refused
    case.config_path.write_text(yaml.safe_dump({"pipelines": {case.name: case.spec, "broken": broken}}))

    run = build_compact_dag().test()

    assert str(run.state) == "success", _states(run)
    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        assert len(partitions.children(conn, case.table)) == 1
    assert case.violations() == []


def test_compact_dag_compacts_an_iceberg_pipeline_s_table_too(case, airflow_db):
    """The compact task reports what each sink's compaction did: an Iceberg table's merges files and
    has no partition children (the task read `children_after` of every sink's, and failed on this one)."""
    from eosflow.sinks.iceberg.catalog import catalog
    from eosflow_airflow.dags import build_compact_dag

    case.spec.pop("target_table", None)
    case.write_config(sink="iceberg", table=f"lake.{case.name}")
    case.produce(100, seed=409, partitions=1)
    for _ in range(3):
        case.ingest(max_records=40)
    files_before = len(catalog(case.settings).load_table(f"lake.{case.name}").inspect.files())

    run = build_compact_dag().test()

    assert str(run.state) == "success", _states(run)
    table = catalog(case.settings).load_table(f"lake.{case.name}")  # read back with PyIceberg's scan
    assert files_before >= 3 and len(table.inspect.files()) < files_before
    assert sorted(r["kafka_offset"] for r in table.scan().to_arrow().to_pylist()) == list(range(100))


def test_a_backfill_dry_run_lists_the_chunks_and_commits_nothing(case, airflow_db):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from eosflow_airflow.dags import build_backfill_dag

    case.produce(300, seed=405, partitions=1)
    case.ingest()
    case.write_config(transform_version="v2")
    ledger = case.ledger()
    plans = case.query("select count(*) from eosflow.plans where pipeline = %s", case.name)
    run = build_backfill_dag(case.pipeline).test(
        run_conf={
            "mode": "replay",
            "partitions": "0",
            "from_offset": 0,
            "to_offset": 200,
            "chunk_size": 100,
            "dry_run": True,
        }
    )
    states = _states(run)
    assert str(run.state) == "success", states
    assert states == {
        "validate": "success",
        "spark_chunk": "skipped",
        "verify": "skipped",
        "announce": "skipped",
    }
    with create_session() as session:
        [chunks] = session.scalars(
            XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids="validate", key="chunks")
        ).all()
    assert XComModel.deserialize_value(chunks) == [
        f"{case.topic}[0] [0, 100) (100 offsets)",
        f"{case.topic}[0] [100, 200) (100 offsets)",
    ]
    # Nothing committed, nothing planned: the rows are still v1's.
    assert case.ledger() == ledger
    assert case.query("select count(*) from eosflow.plans where pipeline = %s", case.name) == plans
    assert dict(case.query(f"select transform_version, count(*) from {case.table} group by 1")) == {"v1": 300}


def test_a_failed_task_posts_its_one_line_reason_to_the_alert_webhook(case, airflow_db, monkeypatch):
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from urllib.parse import quote

    from eosflow_airflow.dags import build_backfill_dag

    received: list[dict] = []

    class Webhook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Webhook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("EOSFLOW_ALERT_WEBHOOK", f"http://127.0.0.1:{server.server_port}/alerts")
    try:
        case.produce(100, seed=406, partitions=1)
        case.ingest()
        run = build_backfill_dag(case.pipeline).test(
            run_conf={"mode": "replay", "partitions": "0", "to_offset": 500}
        )
    finally:
        server.shutdown()
        server.server_close()
    assert str(run.state) == "failed" and _states(run)["validate"] == "failed"
    [alert] = received  # one task failed; the ones it kept from running do not alert
    assert {k: alert[k] for k in ("dag_id", "task_id", "run_id", "map_index")} == {
        "dag_id": f"eosflow_backfill_{case.name}",
        "task_id": "validate",
        "run_id": run.run_id,
        "map_index": -1,
    }
    assert alert["reason"] == (
        f"backfill of {case.name} refused, nothing was run: {case.topic}[0]: [0, 500) was never committed; "
        "committed offsets are [0, 100)"
    )
    assert f"/dags/eosflow_backfill_{case.name}/runs/{quote(run.run_id)}/tasks/validate" in alert["log_url"]


def test_the_health_dag_fails_when_records_wait_and_nothing_committed_for_n_intervals(
    case, airflow_db, task_outcomes, monkeypatch
):
    from eosflow_airflow.dags import build_health_dag

    monkeypatch.setenv("EOSFLOW_INGEST_INTERVAL_MINUTES", "1")
    # 0.6 s: this test cannot wait 3 intervals. Only the stale verdict depends on the limit (lag 0 is
    # healthy at any age), and a loaded machine only makes the commit older, never younger.
    monkeypatch.setenv("EOSFLOW_STALE_INTERVALS", "0.01")
    case.produce(80, seed=406, partitions=2)
    case.ingest()
    dag = task_outcomes.watch(build_health_dag({case.name: case.pipeline}))
    assert str(dag.test().state) == "success"  # caught up

    case.produce(25, seed=407, partitions=2)
    time.sleep(1.5)  # records wait, and the last commit is older than the limit
    run = dag.test()
    assert str(run.state) == "failed"
    (reason,) = task_outcomes.failed["pipeline_health"]
    assert f"pipeline {case.name}: lag 25" in str(reason) and "STALE: 25 records wait" in str(reason)
    assert f"eosflow_ingest_{case.name} paused" in str(reason)
    assert "pipeline_health" not in task_outcomes.retried  # stale is no hiccup: no retry

    case.ingest()
    assert str(dag.test().state) == "success"


def test_the_health_dag_names_the_transaction_that_holds_a_publishers_rows_back(
    case, airflow_db, task_outcomes, monkeypatch
):
    """A publisher waits, by design, for every older transaction of the cluster: a forgotten one stalled
    it without a word outside its own log. The health DAG fails naming it (pid, database, age)."""
    import psycopg

    from eosflow_airflow.dags import build_health_dag
    from tests.outbox import Outbox

    monkeypatch.setenv("EOSFLOW_PUBLISH_STALE_MINUTES", "0.05")  # 3 s
    box = Outbox(case)
    dsn = case.settings.warehouse_dsn
    with psycopg.connect(dsn) as conn:
        box.insert(conn, 3)
    assert box.publish().rows == 3
    dag = task_outcomes.watch(build_health_dag({}, {case.name: box.publisher}))
    assert str(dag.test().state) == "success"  # nothing waits

    with psycopg.connect(dsn) as holder:  # a session left idle in its transaction
        holder.execute("select pg_current_xact_id()")
        with psycopg.connect(dsn) as conn:
            box.insert(conn, 2)  # committed, after the holder began: held back
        time.sleep(4)
        run = dag.test()
        assert str(run.state) == "failed"
        (reason,) = task_outcomes.failed["publisher_health"]
        assert f"STALE: publisher {case.name}: 2 committed row(s) held back" in str(reason)
        assert f"pid {holder.info.backend_pid} (database " in str(reason) and "pg_terminate_backend" in str(
            reason
        )
        assert "publisher_health" not in task_outcomes.retried
        holder.rollback()
    assert str(dag.test().state) == "success"  # ended: the rows can go, nothing holds them


def test_one_pipeline_that_cannot_be_checked_does_not_hide_another_s_staleness(
    case, airflow_db, task_outcomes, monkeypatch
):
    import yaml

    from eosflow import pipelines
    from eosflow_airflow.dags import build_health_dag

    monkeypatch.setenv("EOSFLOW_STALE_INTERVALS", "0.01")
    case.produce(30, seed=408, partitions=1)  # never ingested: stale
    ghost = dict(case.spec, topics=[f"missing.{case.name}"], target_table=f"raw.ghost_{case.name}")
    case.config_path.write_text(
        yaml.safe_dump({"pipelines": {case.name: case.spec, f"g_{case.name}": ghost}})
    )
    declared = pipelines.load_all(case.settings, case.config_path)
    run = task_outcomes.watch(build_health_dag(declared)).test()
    assert str(run.state) == "failed"
    (reason,) = task_outcomes.failed["pipeline_health"]
    assert f"pipeline {case.name}: lag 30" in str(reason) and "STALE" in str(reason)
    assert f"pipeline g_{case.name}: could not be checked: TopicMissingError" in str(reason)
