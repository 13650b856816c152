"""Every DAG imports cleanly, is tagged, retries, and touches no network or database at import."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "plugins" / "eosflow_airflow" / "dag_files"  # the installed package's bundle


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


# -- One bad pipeline --------------------------------------------------------------------------------------
def _with_a_bad_pipeline(tmp_path: Path) -> Path:
    """The project's pipelines, and between them `broken`: as orders, but writing into eosflow's schema."""
    import yaml

    body = yaml.safe_load((ROOT / "pipelines.yml").read_text())
    body["pipelines"] = {
        "orders": body["pipelines"]["orders"],
        "broken": body["pipelines"]["orders"] | {"topics": ["broken"], "target_table": "eosflow.ledger"},
        "orders_roundtrip": body["pipelines"]["orders_roundtrip"],
    }
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def test_a_bad_pipeline_is_reported_by_name_and_every_other_pipeline_keeps_its_dags(tmp_path, monkeypatch):
    """A refused pipeline is an import error naming it and the reason, in a DAG file that makes no DAG:
    Airflow marks every DAG of a file with an import error stale (dag_processing.collection), so the
    error must not come from a file that makes the good pipelines' DAGs."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("EOSFLOW_PIPELINES", str(_with_a_bad_pipeline(tmp_path)))
    bag = DagBag(dag_folder=str(DAGS))

    for good in ("orders", "orders_roundtrip"):
        for kind in ("ingest", "backfill"):
            assert f"eosflow_{kind}_{good}" in bag.dag_ids, (kind, good, bag.import_errors)
    assert "eosflow_marts_orders" in bag.dag_ids and "eosflow_health" in bag.dag_ids
    assert not [d for d in bag.dag_ids if d.endswith("_broken")]
    assert set(bag.dags["eosflow_health"].get_task("pipeline_health").op_args[0]) == {
        "orders",
        "orders_roundtrip",
    }
    [(where, error)] = bag.import_errors.items()  # one error, the pipeline's, not one per DAG file
    assert where.endswith("eosflow_config_errors.py"), where
    assert "pipeline 'broken': target_table 'eosflow.ledger' is in schema 'eosflow'" in error  # name, reason
    assert not [d for d in bag.dags.values() if d.fileloc.endswith("eosflow_config_errors.py")]


def test_a_bad_publisher_is_reported_by_name_and_every_other_publisher_keeps_its_dag(tmp_path, monkeypatch):
    """As for a pipeline: one publisher refused (an outbox in eosflow's schema) is named in the import
    error of the file that makes no DAG; the other publisher's DAG and the health DAG stay."""
    import yaml
    from airflow.dag_processing.dagbag import DagBag

    body = yaml.safe_load((ROOT / "pipelines.yml").read_text())
    (name, good), *_ = body["publishers"].items()
    body["publishers"] = {name: good, "broken_pub": good | {"table": "eosflow.ledger", "topic": "broken.pub"}}
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(path))
    bag = DagBag(dag_folder=str(DAGS))

    assert f"eosflow_publish_{name}" in bag.dag_ids and "eosflow_health" in bag.dag_ids, bag.import_errors
    assert "eosflow_publish_broken_pub" not in bag.dag_ids
    [(where, error)] = bag.import_errors.items()
    assert where.endswith("eosflow_config_errors.py"), where
    assert "publisher 'broken_pub'" in error and "eosflow" in error


def test_in_airflow_s_database_the_good_pipelines_dags_stay_active_beside_the_import_error(
    tmp_path, monkeypatch, airflow_db
):
    """What the scheduler and the UI read after a parse: the good DAGs active (not stale), the refused
    pipeline in the import errors. Airflow marks stale every DAG of a file that has an import error."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.models.errors import ParseImportError
    from airflow.utils.session import create_session
    from sqlalchemy import select

    monkeypatch.setenv("EOSFLOW_PIPELINES", str(_with_a_bad_pipeline(tmp_path)))
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=str(DAGS), bundle_path=DAGS, bundle_name="eosflow")
    sync_bag_to_db(bag, "eosflow", None)
    with create_session() as session:
        dags = {
            d.dag_id: (d.is_stale, d.has_import_errors)
            for d in session.scalars(select(DagModel).where(DagModel.dag_id.in_(bag.dag_ids)))
        }
        errors = {
            e.filename: e.stacktrace
            for e in session.scalars(
                select(ParseImportError).where(ParseImportError.bundle_name == "eosflow")
            )
        }
    assert dags["eosflow_ingest_orders"] == dags["eosflow_backfill_orders_roundtrip"] == (False, False)
    assert set(dags.values()) == {(False, False)}
    assert (
        list(errors) == ["eosflow_config_errors.py"]
        and "pipeline 'broken'" in errors["eosflow_config_errors.py"]
    )


def test_a_refusal_that_does_not_name_its_pipeline_is_reported_with_its_name():
    from eosflow.pipelines import PipelineConfigError
    from eosflow_airflow.dags import _naming

    assert _naming("pipeline", "clicks", PipelineConfigError("no topics")) == "pipeline 'clicks': no topics"
    said = PipelineConfigError("p.yml: pipeline 'clicks': no topics")
    assert _naming("pipeline", "clicks", said) == str(said)


def test_every_dag_file_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"eosflow_backfill_orders", "eosflow_ingest_orders", "eosflow_compact"} <= set(dagbag.dag_ids)


def test_one_ingest_dag_and_one_backfill_dag_per_configured_pipeline(dagbag, settings):
    """A backfill DAG per pipeline: Airflow's per-DAG permissions say who may replay which pipeline."""
    from eosflow.pipelines import load_all

    for kind in ("ingest", "backfill"):
        found = {d for d in dagbag.dag_ids if d.startswith(f"eosflow_{kind}_")}
        assert found == {f"eosflow_{kind}_{name}" for name in load_all(settings)}
    assert "eosflow_backfill" not in dagbag.dag_ids  # no DAG replays any pipeline named in its form


def test_every_dag_has_tags_and_every_task_retries_at_least_twice(dagbag):
    for dag in dagbag.dags.values():
        assert dag.tags, f"{dag.dag_id} has no tags"
        for task in dag.tasks:
            assert task.retries >= 2, f"{dag.dag_id}.{task.task_id} retries {task.retries}"


def test_ingest_dags_never_overlap_and_announce_their_table_after_the_checks(dagbag, settings):
    dag = dagbag.dags["eosflow_ingest_orders"]
    assert dag.max_active_runs == 1
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "spark_ingest", "verify", "announce"]
    # Lineage: the topic in, the table out, both named where they live (the providers' URI formats).
    (read,) = dag.get_task("announce").inlets
    (written,) = dag.get_task("announce").outlets
    kafka = settings.bootstrap_servers.split(",")[0]
    assert read.uri == f"kafka://{kafka}/orders"
    assert (
        written.uri == f"postgres://{settings.pg_host}:{settings.pg_port}/{settings.pg_database}/raw/orders"
    )
    # A run that commits nothing must not emit; and no Airflow asset trouble may fail the ingest itself.
    assert dag.get_task("spark_ingest").outlets == [] and dag.get_task("spark_ingest").inlets == []


def test_the_marts_dag_is_scheduled_on_the_table_and_the_publisher_on_the_mart(dagbag, settings):
    marts = dagbag.dags["eosflow_marts_orders"]
    (table,) = marts.timetable.asset_condition.objects
    assert table.uri.endswith(f":{settings.pg_port}/{settings.pg_database}/raw/orders")
    where = f"postgres://{settings.pg_host}:{settings.pg_port}/{settings.pg_database}"
    outlets = marts.get_task("dbt_marts").outlets
    assert [a.uri for a in outlets] == [
        f"{where}/analytics/order_events",
        f"{where}/analytics/event_counts_hourly",
        f"{where}/analytics/orders_published",
    ]
    # Named by their URIs: a name kept across a URI change would leave the new asset inactive.
    assert all(a.name == a.uri for a in outlets)
    # The round trip declares the orders columns too: its marts live in a schema of their own.
    roundtrip = dagbag.dags["eosflow_marts_orders_roundtrip"].get_task("dbt_marts").outlets
    assert roundtrip[0].uri == f"{where}/analytics_orders_roundtrip/order_events"
    publish = dagbag.dags["eosflow_publish_orders_published"]
    (mart,) = publish.timetable.asset_condition.objects
    assert mart.uri == f"{where}/analytics/orders_published"
    kafka = settings.bootstrap_servers.split(",")[0]
    assert [a.uri for a in publish.get_task("publish").outlets] == [f"kafka://{kafka}/orders.published"]
    # A backfill announces its own pipeline's output, as the ingest DAG does (no alias: the DAG names it).
    backfill = dagbag.dags["eosflow_backfill_orders"]
    assert (
        backfill.get_task("announce").outlets
        == dagbag.dags["eosflow_ingest_orders"].get_task("announce").outlets
    )


def test_dag_files_do_no_network_or_database_io_at_import(monkeypatch):
    import psycopg
    from airflow.dag_processing.dagbag import DagBag

    def refuse(*args, **kwargs):
        raise AssertionError(f"I/O at DAG import: {args[:2]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(psycopg, "connect", refuse)
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert bag.dag_ids


def test_both_dags_run_spark_through_eosflows_operator(dagbag):
    from eosflow_airflow.operators.spark import EosflowSparkSubmitOperator

    ingest = dagbag.dags["eosflow_ingest_orders"].get_task("spark_ingest")
    chunk = dagbag.dags["eosflow_backfill_orders"].get_task("spark_chunk")
    assert isinstance(ingest, EosflowSparkSubmitOperator)
    assert chunk.operator_class is EosflowSparkSubmitOperator  # a mapped task


def test_ingest_dags_acknowledge_data_loss_only_when_asked(dagbag):
    param = dagbag.dags["eosflow_ingest_orders"].params.get_param("acknowledge_data_loss")
    assert param.value is False and param.schema["type"] == "boolean" and param.description


def test_compaction_runs_hourly_and_never_twice_at_once(dagbag):
    from datetime import timedelta

    dag = dagbag.dags["eosflow_compact"]
    assert dag.max_active_runs == 1
    assert dag.timetable.delta == timedelta(hours=1)
    assert [t.task_id for t in dag.tasks] == ["compact"]


# -- Kafka-woken ingest DAGs (wake_on_records) ----------------------------------------------------------
def orders_declared(tmp_path, monkeypatch, **changes):
    """The project's pipelines file with the orders pipeline changed, its DAGs parsed with no I/O allowed."""
    import yaml

    body = yaml.safe_load((ROOT / "pipelines.yml").read_text())
    body["pipelines"]["orders"].update(changes)
    bag = parsed_without_io(tmp_path, monkeypatch, body)
    assert bag.import_errors == {}
    return bag


def parsed_without_io(tmp_path, monkeypatch, body: dict):
    """The DAG folder parsed with `body` as the pipelines file, no network or database I/O allowed."""
    import psycopg
    import yaml
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump(body))
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(path))

    def refuse(*args, **kwargs):
        raise AssertionError(f"I/O at DAG import: {args[:2]}")

    with monkeypatch.context() as io:
        io.setattr(socket.socket, "connect", refuse)
        io.setattr(socket, "create_connection", refuse)
        io.setattr(psycopg, "connect", refuse)
        return DagBag(dag_folder=str(DAGS))


@pytest.fixture
def woken_orders(tmp_path, monkeypatch):
    """Orders opted in to wake_on_records."""
    return orders_declared(tmp_path, monkeypatch, wake_on_records=True)


def _interval() -> object:
    import os
    from datetime import timedelta

    return timedelta(minutes=int(os.environ.get("EOSFLOW_INGEST_INTERVAL_MINUTES", "5")))


def test_waking_is_opt_in_the_project_s_ingest_dags_run_on_their_interval(dagbag):
    from airflow.sdk import AssetOrTimeSchedule

    for dag_id in (d for d in dagbag.dag_ids if d.startswith("eosflow_ingest_")):
        timetable = dagbag.dags[dag_id].timetable
        assert not isinstance(timetable, AssetOrTimeSchedule), dag_id
        assert timetable.delta == _interval()


def test_a_woken_ingest_dag_runs_on_its_interval_or_when_records_arrive(woken_orders):
    from airflow.providers.common.compat.module_loading import import_string
    from airflow.sdk import AssetOrTimeSchedule

    from eosflow_airflow.triggers.wake import PipelineWakeTrigger, records_arrived

    dag = woken_orders.dags["eosflow_ingest_orders"]
    assert isinstance(dag.timetable, AssetOrTimeSchedule)
    assert dag.timetable.timetable.delta == _interval()  # a lost wake-up still waits one interval at most
    assert dag.max_active_runs == 1  # wake-ups during a run coalesce into one run after it
    [asset] = dag.timetable.asset_condition.objects
    assert asset.name == "wake.orders"
    [watcher] = asset.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, PipelineWakeTrigger)
    assert (trigger.topics, trigger.group_id, trigger.kafka_config_id) == (
        ["orders"],
        "eosflow.wake.orders",  # its own group, never the Kafka sink's eosflow.orders
        "kafka_default",
    )
    assert import_string(trigger.apply_function) is records_arrived
    # The other pipelines are not woken.
    others = [d for d in woken_orders.dag_ids if d.startswith("eosflow_ingest_") and d != dag.dag_id]
    assert all(not isinstance(woken_orders.dags[d].timetable, AssetOrTimeSchedule) for d in others)


def test_a_woken_ingest_dag_serializes_for_the_scheduler_and_the_triggerer(woken_orders):
    import json

    from airflow.serialization.serialized_objects import DagSerialization

    stored = DagSerialization.to_dict(woken_orders.dags["eosflow_ingest_orders"])
    assert "eosflow_airflow.triggers.wake.PipelineWakeTrigger" in json.dumps(stored)
    again = DagSerialization.from_dict(stored)
    assert type(again.timetable).__name__ == "AssetOrTimeSchedule"


# -- Stream pipelines (mode: stream) ---------------------------------------------------------------------
@pytest.fixture
def streamed_orders(tmp_path, monkeypatch):
    """Orders declared mode: stream."""
    return orders_declared(tmp_path, monkeypatch, mode="stream")


def test_the_health_dag_checks_every_pipeline_against_n_of_its_intervals(dagbag):
    task, publishers = sorted(dagbag.dags["eosflow_health"].tasks, key=lambda t: t.task_id)
    assert task.task_id == "pipeline_health" and task.retries >= 2
    # every publisher of pipelines.yml, against EOSFLOW_PUBLISH_STALE_MINUTES (5)
    assert publishers.task_id == "publisher_health"
    assert tuple(publishers.op_args) == (["orders_published"], 300.0)
    limits = task.op_args[0]
    assert set(limits) == {"orders", "orders_roundtrip", "customers"}  # every pipeline of pipelines.yml
    # EOSFLOW_STALE_INTERVALS (3) x EOSFLOW_INGEST_INTERVAL_MINUTES
    assert limits["orders"] == 3 * _interval().total_seconds()


def test_a_stream_pipeline_s_dag_runs_only_when_triggered_and_the_health_dag_checks_it(streamed_orders):
    assert type(streamed_orders.dags["eosflow_ingest_orders"].timetable).__name__ == "NullTimetable"
    assert streamed_orders.dags["eosflow_ingest_orders_roundtrip"].timetable.delta == _interval()
    task = streamed_orders.dags["eosflow_health"].get_task("pipeline_health")
    # a stream's limit is EOSFLOW_STREAM_STALE_MINUTES (5), a batch pipeline's 3 intervals
    batch = 3 * _interval().total_seconds()
    assert task.op_args[0] == {"orders": 300.0, "orders_roundtrip": batch, "customers": batch}
    # A stream's commits emit no asset event: its marts rebuild every interval too.
    marts = streamed_orders.dags["eosflow_marts_orders"].timetable
    assert type(marts).__name__ == "AssetOrTimeSchedule" and marts.timetable.delta == _interval()


# -- The backfill form ----------------------------------------------------------------------------------
def test_the_backfill_form_has_titles_and_sections(dagbag):
    params = dagbag.dags["eosflow_backfill_orders"].params
    schemas = {name: params.get_param(name).schema for name in params}
    assert all(s.get("title") and s["title"] != name for name, s in schemas.items())  # not the raw name
    sections: dict[str | None, list[str]] = {}
    for name, schema in schemas.items():
        sections.setdefault(schema.get("section"), []).append(name)
    assert sections == {
        # No section: Airflow's "Run Parameters", the one open when the Trigger dialog opens. No pipeline:
        # the DAG is the pipeline's own.
        None: ["mode", "partitions", "dry_run"],
        "Range by offset (empty: everything)": ["from_offset", "to_offset"],
        "Range by time (instead of offsets)": ["from_time", "to_time"],
        "Topic and chunk size": ["topic", "chunk_size"],
    }
    mode = params.get_param("mode").schema
    assert set(mode["values_display"]) == set(mode["enum"]) == {"catch-up", "replay"}


def test_the_backfill_time_bounds_are_date_time_pickers_that_may_stay_empty(dagbag):
    params = dagbag.dags["eosflow_backfill_orders"].params
    for name in ("from_time", "to_time"):
        param = params.get_param(name)
        assert param.schema["format"] == "date-time"
        assert param.schema["type"] == ["null", "string"]  # the UI shows a picker for the non-null type
        assert param.resolve(None) is None
        # What the UI's picker sends (an ISO string in UTC) and what the API takes.
        assert param.resolve("2026-01-01T12:00:00.000Z") == "2026-01-01T12:00:00.000Z"


def test_the_backfill_dry_run_is_a_switch_off_by_default(dagbag):
    param = dagbag.dags["eosflow_backfill_orders"].params.get_param("dry_run")
    assert param.value is False and param.schema["type"] == "boolean"
    assert "nothing is committed" in param.description


def test_the_backfill_form_serializes_with_its_titles_sections_and_formats(dagbag):
    from airflow.serialization.serialized_objects import DagSerialization

    again = DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags["eosflow_backfill_orders"]))
    from_time = again.params.get_param("from_time").schema
    assert (from_time["format"], from_time["title"], from_time["section"]) == (  # as the UI gets them
        "date-time",
        "From time",
        "Range by time (instead of offsets)",
    )
    assert again.params.get_param("dry_run").value is False


# -- Alerts ---------------------------------------------------------------------------------------------
def test_every_task_of_every_dag_alerts_on_failure(dagbag):
    from eosflow_airflow.notifications.alerts import FailureAlert

    for dag in dagbag.dags.values():
        for task in dag.tasks:
            callbacks = task.on_failure_callback or []
            assert any(isinstance(c, FailureAlert) for c in callbacks), f"{dag.dag_id}.{task.task_id}"


def test_spark_tasks_time_out_after_two_hours_by_default(dagbag):
    from datetime import timedelta

    ingest = dagbag.dags["eosflow_ingest_orders"].get_task("spark_ingest")
    chunk = dagbag.dags["eosflow_backfill_orders"].get_task("spark_chunk")
    assert ingest.execution_timeout == timedelta(hours=2)
    assert chunk.partial_kwargs["execution_timeout"] == timedelta(hours=2)  # a mapped task


def test_the_spark_timeout_is_configurable_and_refuses_nonsense(monkeypatch):
    from datetime import timedelta

    from eosflow_airflow.operators.spark import execution_timeout

    monkeypatch.setenv("EOSFLOW_SPARK_TIMEOUT_MINUTES", "30")
    assert execution_timeout() == timedelta(minutes=30)
    for bad in ("0", "-5", "two hours"):
        monkeypatch.setenv("EOSFLOW_SPARK_TIMEOUT_MINUTES", bad)
        with pytest.raises(ValueError, match="EOSFLOW_SPARK_TIMEOUT_MINUTES"):
            execution_timeout()


# -- A whole database in one declaration ---------------------------------------------------------------
def test_a_database_entry_gets_one_ingest_and_one_backfill_dag_parsed_without_kafka_or_the_warehouse(
    tmp_path, monkeypatch
):
    """Its members are found when the DAG runs (discover), so parsing asks neither Kafka nor Postgres; a
    refused entry is an import error naming it, as a refused pipeline is."""
    import yaml

    body = yaml.safe_load((ROOT / "pipelines.yml").read_text())
    body["pipelines"]["shop"] = {
        "database": {"topic_prefix": "shop"},
        "changes": "debezium",
        "target_schema": "replica",
    }
    body["pipelines"]["broken_db"] = {"database": {"topic_prefix": "x"}, "changes": "keyed"}
    bag = parsed_without_io(tmp_path, monkeypatch, body)
    ingest, backfill = bag.dags["eosflow_ingest_shop"], bag.dags["eosflow_backfill_shop"]
    assert [t.task_id for t in ingest.topological_sort()] == [
        "discover",
        "member.job_args",
        "member.spark_ingest",
        "member.verify",
    ]
    assert ingest.max_active_runs == 1 and "database" in ingest.tags
    assert backfill.params.get_param("member").schema["type"] == "string"
    assert "eosflow_ingest_orders" in bag.dag_ids  # the file's pipelines keep theirs
    [(where, error)] = bag.import_errors.items()
    assert (
        where.endswith("eosflow_config_errors.py") and "'broken_db'" in error and "changes: debezium" in error
    )
