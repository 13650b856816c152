"""A database entry's one ingest DAG, run in-process (dag.test) against the real stack: discovery, then a
map index per member (its Spark job via spark-submit and its checks); a table whose topic appears later is
a new map index of the next run, not a new DAG."""

from __future__ import annotations

import uuid

import pytest
import yaml
from confluent_kafka import Producer

from eosflow.kafka_admin import ensure_topic
from tests.conftest import LINEAGE_DAGS
from tests.debezium_records import Table

pytestmark = pytest.mark.integration


def _states(run) -> dict[str, str]:
    return {
        ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""): str(ti.state)
        for ti in run.get_task_instances()
    }


def _send(settings, table: Table, changes: list[tuple[str, dict]]) -> None:
    ensure_topic(settings.bootstrap_servers, table.topic, 1, log=lambda m: None)
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "enable.idempotence": True})
    for op, row in changes:
        key, value = table.change(op, row)
        producer.produce(table.topic, key=key, value=value)
    assert producer.flush(30) == 0


def _assert_the_member_task_reported_its_datasets(lineage, dag_id: str, topic: str, replica: str) -> None:
    """The mapped member's Spark task, through Airflow's OpenLineage provider: START and COMPLETE of
    `<dag_id>.member.spark_ingest`, each valid by the spec's schemas, the member's topic in, its changelog
    and state table out, and on COMPLETE the batch it committed (`eosflow_run`)."""
    import json

    from tests.unit.observe.test_openlineage import _validate_core

    job = f"{dag_id}.member.spark_ingest"
    events = [json.loads(line) for line in lineage.read_text().splitlines() if line.strip()]
    mine = [e for e in events if e["job"]["name"] == job]
    assert [e["eventType"] for e in mine] == ["START", "COMPLETE"], [
        (e["job"]["name"], e["eventType"]) for e in events
    ]
    for event in mine:
        _validate_core(event)
        assert [d["name"] for d in event["inputs"]] == [topic]
        assert [d["name"] for d in event["outputs"]] == [
            f"warehouse.{replica}__changes",
            f"warehouse.{replica}",
        ]
    facet = mine[1]["run"]["facets"]["eosflow_run"]
    assert facet["outcome"] == "committed" and facet["ranges"][0]["written"] == 3


def test_the_database_dag_runs_each_member_and_a_later_table_is_a_new_map_index(
    running_stack, airflow_db, airflow_lineage_file, tmp_path, monkeypatch
):
    """Two DAG runs, three member Spark jobs through spark-submit: about a minute and a half. The member's
    Spark task reports itself through Airflow's OpenLineage provider as an ingest DAG's does."""
    from eosflow_airflow.dags import build_database_dag, declared_databases

    # The entry's DAG reports through Airflow's OpenLineage provider: its id starts with LINEAGE_DAGS.
    prefix, entry, target = (f"{p}{uuid.uuid4().hex[:8]}" for p in ("db", "lineage_", "r"))
    config = tmp_path / "pipelines.yml"
    database = {"topic_prefix": prefix}
    config.write_text(
        yaml.safe_dump(
            {"pipelines": {entry: {"database": database, "changes": "debezium", "target_schema": target}}}
        )
    )
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(config))
    columns = {"id": "bigint", "email": "text", "balance": "numeric(12,2)"}
    customers = Table(f"{prefix}.public.customers", columns)
    _send(
        running_stack,
        customers,
        [
            ("c", {"id": 1, "email": "a@x", "balance": "1.50"}),
            ("c", {"id": 2, "email": "b@x", "balance": None}),
            ("u", {"id": 1, "email": "a2@x", "balance": "2.00"}),
        ],
    )
    dag = build_database_dag(declared_databases()[entry])
    assert dag.dag_id.startswith(LINEAGE_DAGS)
    first = dag.test()
    assert str(first.state) == "success", _states(first)
    assert _states(first) == {
        "discover": "success",
        "member.job_args[0]": "success",
        "member.spark_ingest[0]": "success",
        "member.verify[0]": "success",
    }
    _assert_the_member_task_reported_its_datasets(
        airflow_lineage_file, dag.dag_id, customers.topic, f"{target}.customers"
    )

    orders = Table(f"{prefix}.public.orders", {"id": "bigint", "total": "numeric(12,2)"})
    _send(running_stack, orders, [("c", {"id": 10, "total": "20.00"})])
    _send(running_stack, customers, [("d", {"id": 2, "email": "b@x", "balance": None})])
    second = dag.test()
    assert str(second.state) == "success", _states(second)
    assert {k for k, v in _states(second).items() if v == "success"} >= {
        "member.spark_ingest[0]",
        "member.spark_ingest[1]",
        "member.verify[1]",
    }
    import psycopg

    with psycopg.connect(running_stack.warehouse_dsn) as conn:
        assert conn.execute(
            f"select id, email, balance::text from {target}.customers order by id"
        ).fetchall() == [(1, "a2@x", "2.00")]
        assert conn.execute(f"select id, total::text from {target}.orders").fetchall() == [(10, "20.00")]

    # The view shows each member as a pipeline, read as the read-only role (EosflowHook.reader_settings).
    from eosflow.observe.state import snapshot
    from eosflow.pipelines import load_databases, members
    from eosflow_airflow.hooks.eosflow import EosflowHook

    reader = EosflowHook().reader_settings()
    shown = members(reader, load_databases(reader)[0][entry])
    assert sorted(shown) == [f"{entry}__customers", f"{entry}__orders"]
    states = {s.pipeline.name: s for s in snapshot(reader, list(shown.values()))}
    assert states[f"{entry}__customers"].totals["written"] == 4  # two creates, an update, a delete
    assert not states[f"{entry}__orders"].kafka_error and states[f"{entry}__orders"].checks

    # The entry's backfill DAG: the form's table must be one of its members; a dry run lists the chunks.
    from eosflow_airflow.dags import build_database_backfill_dag

    backfill = build_database_backfill_dag(declared_databases()[entry])
    stranger = backfill.test(run_conf={"member": "orders", "mode": "replay"})
    assert str(stranger.state) == "failed" and _states(stranger)["validate"] == "failed"
    dry = backfill.test(run_conf={"member": f"{entry}__customers", "mode": "replay", "dry_run": True})
    assert str(dry.state) == "success", _states(dry)
    (validate,) = [ti for ti in dry.get_task_instances() if ti.task_id == "validate"]
    assert validate.xcom_pull(task_ids="validate", key="chunks") == [
        f"{customers.topic}[0] [0, 4) (4 offsets)"
    ]
