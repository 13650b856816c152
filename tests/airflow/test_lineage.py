"""Lineage: a run emits its output asset only when it committed rows; the marts DAG builds on it."""

from __future__ import annotations

import pytest

from eosflow.ledger import positions

pytestmark = pytest.mark.integration


def _events(uri: str) -> list[dict]:
    """The asset events Airflow recorded for `uri`, oldest first: source and extra."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent.source_dag_id, AssetEvent.source_task_id, AssetEvent.extra)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
        ).all()
    return [{"dag": d, "task": t, "extra": e} for d, t, e in rows]


def _state(run, task_id: str) -> str:
    (ti,) = [ti for ti in run.get_task_instances() if ti.task_id == task_id and ti.map_index < 0]
    return str(ti.state)


def test_the_ingest_dag_emits_its_table_only_when_a_run_committed_rows(case, airflow_db):
    """Slow because it runs the whole ingest DAG twice in process (dag.test: every task of it, once with
    records and once idle) and then a cleared run, to see which runs emit the asset."""
    from eosflow_airflow.dags import build_ingest_dag
    from eosflow_airflow.lineage import output_asset

    uri = output_asset(case.pipeline).uri
    assert uri.endswith(f"/{case.settings.pg_database}/raw/{case.name}") and uri.startswith("postgres://")
    case.produce(300, seed=601, partitions=2)
    dag = build_ingest_dag(case.pipeline)

    first = dag.test()
    assert str(first.state) == "success" and _state(first, "announce") == "success"
    (event,) = _events(uri)
    assert event["dag"] == dag.dag_id and event["task"] == "announce"
    extra = event["extra"]
    assert (extra["rows_written"], extra["records_read"], extra["pipeline"]) == (300, 300, case.name)
    assert extra["run_id"] == first.run_id and len(extra["ranges"]) == 2

    # Nothing new in Kafka: the run succeeds, announce is skipped, no event (the marts do not rebuild).
    idle = dag.test()
    assert str(idle.state) == "success" and _state(idle, "announce") == "skipped"
    assert len(_events(uri)) == 1

    # A cleared run finds its plan committed: it commits nothing again, and emits nothing again. (In this
    # process: an event comes from `announce` alone; a cleared Spark task in a process of its own is
    # test_dags_run.py's.)
    assert case.ingest(run_id=first.run_id).outcome == positions.ALREADY_COMMITTED
    assert len(_events(uri)) == 1


def test_a_backfill_replay_emits_its_pipeline_s_table_and_a_dry_run_does_not(case, airflow_db):
    from eosflow_airflow.dags import build_backfill_dag
    from eosflow_airflow.lineage import output_asset

    uri = output_asset(case.pipeline).uri
    case.produce(200, seed=602, partitions=1)
    case.ingest()
    dag = build_backfill_dag(case.pipeline)
    # One chunk (the default size): the lineage is the backfill's, however many chunks it takes;
    # test_dags_run.py replays in chunks. A second chunk would be a second spark-submit.
    conf = {"mode": "replay", "partitions": "0"}

    dry = dag.test(run_conf=conf | {"dry_run": True})
    assert str(dry.state) == "success" and _state(dry, "announce") == "skipped"
    assert _events(uri) == []

    replay = dag.test(run_conf=conf | {"dry_run": False})  # dag.test keeps the last run's conf
    assert str(replay.state) == "success", [(t.task_id, t.state) for t in replay.get_task_instances()]
    (event,) = _events(uri)
    assert event["dag"] == f"eosflow_backfill_{case.name}"  # its own DAG, no alias between
    assert event["extra"]["rows_written"] == 200 and all(
        r.endswith("replay") for r in event["extra"]["ranges"]
    )


def test_the_marts_dag_builds_the_marts_of_its_pipeline(case, airflow_db):
    from eosflow_airflow.dags import build_marts_dag
    from eosflow_airflow.operators.tasks import verify

    case.produce(250, seed=603, partitions=2)
    # What an ingest run leaves: its commit, then its verify task (the staging the marts read). Its
    # Spark task's spark-submit adds nothing here; test_dags_run.py runs the ingest DAG whole.
    case.ingest()
    verify.function(case.name)
    schema = f"analytics_{case.name}"
    # The ingest DAG checks the invariants only; the marts are the marts DAG's.
    assert case.query("select to_regclass(%s)", f"{schema}.order_events") == [(None,)]
    run = build_marts_dag(case.pipeline).test()
    assert str(run.state) == "success"
    (count,) = case.query(f"select count(*) from {schema}.order_events")[0]
    assert count == 250


def test_an_asset_left_by_earlier_eosflow_does_not_make_the_new_one_inactive(case, airflow_db):
    """eosflow named the table's asset `warehouse.raw.<table>` with the URI postgres://warehouse/raw/<table>
    before the URIs named the database. Airflow keeps names unique among active assets: had the name
    stayed with the new URI, the new asset would be inactive and `announce` would fail."""
    from airflow.models.asset import AssetActive, AssetModel
    from airflow.utils.session import create_session

    from eosflow_airflow.dags import build_ingest_dag

    earlier = {"name": f"warehouse.raw.{case.name}", "uri": f"postgres://warehouse/raw/{case.name}"}
    with create_session() as session:  # as a scheduler left it: active, until it orphans the asset
        session.add(AssetModel(**earlier, group="asset"))
        session.flush()
        session.add(AssetActive(**earlier))
    case.produce(50, seed=604, partitions=1)
    run = build_ingest_dag(case.pipeline).test()
    assert str(run.state) == "success" and _state(run, "announce") == "success"


def test_a_run_planned_without_a_ledger_mark_still_announces_what_it_committed(case, airflow_db, monkeypatch):
    """A run planned by an eosflow before lineage (in flight through an upgrade) pushed no mark."""
    from eosflow_airflow.dags import build_ingest_dag
    from eosflow_airflow.lineage import output_asset
    from eosflow_airflow.operators import tasks

    monkeypatch.setattr(tasks, "_ledger_mark", lambda settings: None)
    case.produce(40, seed=605, partitions=1)
    run = build_ingest_dag(case.pipeline).test()
    assert str(run.state) == "success" and _state(run, "announce") == "success"
    (event,) = _events(output_asset(case.pipeline).uri)
    assert event["extra"]["rows_written"] == 40


def test_the_marts_build_and_the_next_verify_can_run_at_once(case):
    """They run in different DAGs, so at the same time; each must read its own dbt results."""
    from concurrent.futures import ThreadPoolExecutor

    from eosflow.verify import build_marts, verify_pipeline

    case.produce(120, seed=606, partitions=2)
    case.ingest()
    assert verify_pipeline(case.settings, case.name, marts=False).ok  # as the ingest DAG did before
    case.produce(30, seed=607, partitions=2)
    case.ingest()  # the next run commits, and verifies while the marts build on the first one's event
    with ThreadPoolExecutor(2) as pool:
        checked = pool.submit(verify_pipeline, case.settings, case.name, marts=False)
        built = pool.submit(build_marts, case.settings, case.name)
        checked, built = checked.result(), built.result()
    assert checked.target_dir != built.target_dir
    assert checked.ok and sorted(c.invariant for c in checked.checks if c.invariant) == [
        f"I{n}" for n in range(1, 7)
    ]
    assert built.ok and {c.name for c in built.checks} >= {"unique_order_events_event_id"}
