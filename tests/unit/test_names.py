"""Names in the pipelines file (docs/DESIGN.md, "Trust boundaries", Names): matched whole, within Postgres'
63 bytes (less where eosflow adds to them), and never in a schema eosflow, dbt or Postgres keeps."""

from __future__ import annotations

import pytest
import yaml

from eosflow import names
from eosflow import settings as settings_mod
from eosflow.pipelines import PipelineConfigError, load_all
from eosflow.publish.declaration import load_publishers
from tests.unit.test_pipelines import _spec

OUTBOX = {"table": "outbox.orders", "topic": "orders.out", "id": "id"}


def _kafka(**changes) -> dict:
    spec = {k: v for k, v in _spec(sink="kafka", output_topic="out").items() if k != "target_table"}
    return spec | changes


def _iceberg(**changes) -> dict:
    spec = {k: v for k, v in _spec(sink="iceberg", table="lake.orders").items() if k != "target_table"}
    return spec | changes


def _pipelines(tmp_path, pipelines: dict):
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": pipelines}))
    return load_all(settings_mod.load(), path)


def _publishers(tmp_path, publishers: dict):
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": {"p": _spec()}, "publishers": publishers}))
    return load_publishers(settings_mod.load(), path)


# ---- matched whole: a trailing newline is not part of a name


@pytest.mark.parametrize(
    "spec",
    [
        _spec(target_table="raw.t1\n"),
        _kafka(output_topic="out\n"),
        _kafka(dead_letter_topic="out.rejected\n"),
        _iceberg(table="lake.t1\n"),
    ],
    ids=["target_table", "output_topic", "dead_letter_topic", "iceberg table"],
)
def test_a_name_with_a_trailing_newline_is_refused(tmp_path, spec):
    with pytest.raises(PipelineConfigError, match=r"pipeline 'p'.*\\n"):
        _pipelines(tmp_path, {"p": spec})


def test_a_pipeline_name_with_a_trailing_newline_is_refused(tmp_path):
    with pytest.raises(PipelineConfigError, match="lower-case letters"):
        _pipelines(tmp_path, {"orders\n": _spec()})


@pytest.mark.parametrize(
    "change",
    [{"table": "outbox.orders\n"}, {"topic": "orders.out\n"}, {"id": "id\n"}, {"key": "k\n"}],
    ids=["table", "topic", "id", "key"],
)
def test_a_publisher_s_name_with_a_trailing_newline_is_refused(tmp_path, change):
    with pytest.raises(PipelineConfigError, match=r"publisher 'o'"):
        _publishers(tmp_path, {"o": OUTBOX | change})
    with pytest.raises(PipelineConfigError, match="lower-case letters"):
        _publishers(tmp_path, {"o\n": OUTBOX})


def test_the_patterns_are_whole_even_for_match():
    # A caller using .match (not fullmatch) gets a whole match too: the patterns carry \A and \Z.
    for pattern, good in (
        (names.NAME, "t1"),
        (names.TABLE, "raw.t1"),
        (names.COLUMN, "c"),
        (names.TOPIC, "t"),
    ):
        assert pattern.match(good) and not pattern.match(good + "\n")


# ---- lengths: what Postgres would cut is refused, naming the limit


def test_two_targets_postgres_would_cut_to_one_table_are_refused(tmp_path):
    # 67 characters each: Postgres keeps 63, and both would write raw.<the same 63>.
    long_a, long_b = "raw." + "t" * 63 + "_a", "raw." + "t" * 63 + "_b"
    with pytest.raises(PipelineConfigError, match=r"pipeline 'a'.*is 65 bytes; at most 55"):
        _pipelines(tmp_path, {"a": _spec(target_table=long_a), "b": _spec(target_table=long_b)})


def test_a_target_s_parts_are_within_their_limits(tmp_path):
    at_most = "raw_" + "s" * 59 + "." + "t" * 55  # schema 63 bytes, table 55 (<table>_offsets fits 63)
    assert _pipelines(tmp_path, {"p": _spec(target_table=at_most)})["p"].target_table == at_most
    with pytest.raises(PipelineConfigError, match=r"is 64 bytes; at most 63: Postgres keeps 63"):
        _pipelines(tmp_path, {"p": _spec(target_table="s" * 64 + ".t")})
    with pytest.raises(PipelineConfigError, match=r"is 56 bytes; at most 55: eosflow names an index"):
        _pipelines(tmp_path, {"p": _spec(target_table="raw." + "t" * 56)})
    with pytest.raises(PipelineConfigError, match=r"is 64 bytes; at most 63"):
        _pipelines(tmp_path, {"p": _iceberg(table="lake." + "t" * 64)})


def test_a_pipeline_name_leaves_room_for_the_schemas_named_after_it(tmp_path):
    longest = "p" * names.PIPELINE_NAME_BYTES
    assert len("analytics_failures_" + longest) == 63
    assert longest in _pipelines(tmp_path, {longest: _spec()})
    with pytest.raises(PipelineConfigError, match=r"45 bytes; at most 44: .*analytics_failures_<pipeline>"):
        _pipelines(tmp_path, {longest + "p": _spec()})
    # The DAG file once raised on a 300-character name (Airflow's dag_id limit): refused here first.
    with pytest.raises(PipelineConfigError, match=r"300 bytes; at most 44"):
        _pipelines(tmp_path, {"p" * 300: _spec()})


@pytest.mark.parametrize(("name", "owner"), [("failures", "'orders'"), ("failures_x", "'x'")])
def test_a_pipeline_whose_marts_schema_is_another_s_failures_schema_is_refused(tmp_path, name, owner):
    with pytest.raises(PipelineConfigError, match=f"analytics_{name}, is where dbt stores .*{owner}"):
        _pipelines(tmp_path, {name: _spec()})


def test_publisher_names_and_columns_are_within_63_bytes(tmp_path):
    assert "o" * 63 in _publishers(tmp_path, {"o" * 63: OUTBOX})
    with pytest.raises(PipelineConfigError, match=r"64 bytes; at most 63"):
        _publishers(tmp_path, {"o" * 64: OUTBOX})
    with pytest.raises(PipelineConfigError, match=r"64 bytes; at most 63"):
        _publishers(tmp_path, {"o": OUTBOX | {"table": "outbox." + "t" * 64}})
    with pytest.raises(PipelineConfigError, match=r"id 'iii.*' must be a column name"):
        _publishers(tmp_path, {"o": OUTBOX | {"id": "i" * 64}})


# ---- schemas someone else keeps


@pytest.mark.parametrize(
    ("schema", "owner"),
    [
        ("eosflow", "eosflow's own"),
        ("staging", "eosflow's own"),
        ("eosflow_iceberg", "eosflow's own"),
        ("analytics", "dbt's"),
        ("analytics_failures", "dbt's"),
        ("analytics_t_1234", "dbt's"),
        ("analytics_failures_t_1234", "dbt's"),
        ("information_schema", "Postgres' own"),
        ("pg_catalog", "Postgres' own"),
    ],
)
def test_a_target_in_a_schema_someone_else_keeps_is_refused_naming_who(tmp_path, schema, owner):
    for spec in (_spec(target_table=f"{schema}.orders"), _iceberg(table=f"{schema}.orders")):
        with pytest.raises(
            PipelineConfigError, match=f"pipeline 'p'.*in schema '{schema}', which is {owner}"
        ):
            _pipelines(tmp_path, {"p": spec})


@pytest.mark.parametrize(
    "table",
    [
        "eosflow.ledger",
        "staging.ranges",
        "eosflow_iceberg.p",
        "pg_catalog.pg_class",
        "information_schema.tables",
    ],
)
def test_a_publisher_s_outbox_in_eosflow_s_or_postgres_schemas_is_refused(tmp_path, table):
    # Its first run adds a column and an index to the outbox: never to eosflow's ledger or a catalog.
    with pytest.raises(PipelineConfigError, match=f"publisher 'o'.*table '{table}' is in schema"):
        _publishers(tmp_path, {"o": OUTBOX | {"table": table}})


def test_a_publisher_may_publish_a_dbt_mart(tmp_path):
    # What the demo does: dbt builds analytics.orders_published, the publisher sends it.
    found = _publishers(tmp_path, {"o": OUTBOX | {"table": "analytics.orders_published"}})
    assert found["o"].table == "analytics.orders_published"


def test_owned_schema_says_who():
    assert [names.owned_schema(s) for s in ("eosflow", "eosflow_x", "analytics_x", "pg_toast", "raw")] == [
        "eosflow",
        "eosflow",
        "dbt",
        "Postgres",
        None,
    ]
    assert names.owned_schema("analyticsx") is None and names.owned_schema("eosflowx") is None


# ---- topics someone else keeps: a pipeline or a publisher never writes there


@pytest.mark.parametrize(
    ("topic", "owner"),
    [
        ("eosflow.publish.offsets.orders_published", "eosflow's own"),
        ("__consumer_offsets", "Kafka's own"),
        ("__transaction_state", "Kafka's own"),
        ("_schemas", "Kafka's own"),
    ],
)
def test_an_output_topic_someone_else_keeps_is_refused(tmp_path, topic, owner):
    # eosflow.publish.offsets.<publisher> holds a publisher's positions: a pipeline writing there moves them.
    for spec in (_kafka(output_topic=topic), _kafka(dead_letter_topic=topic)):
        with pytest.raises(PipelineConfigError, match=f"pipeline 'p'.*'{topic}' is {owner}"):
            _pipelines(tmp_path, {"p": spec})
    for change in ({"topic": topic}, {"dead_letter_topic": topic}):
        with pytest.raises(PipelineConfigError, match=f"publisher 'o'.*'{topic}' is {owner}"):
            _publishers(tmp_path, {"o": OUTBOX | change})


def test_a_source_topic_may_be_any_kafka_topic_name_but_matched_whole(tmp_path):
    assert _pipelines(tmp_path, {"p": _spec(topics=["eosflow.publish.offsets.x"])})["p"].topic
    with pytest.raises(
        PipelineConfigError, match="topics must be a list of one or more distinct Kafka topic"
    ):
        _pipelines(tmp_path, {"p": _spec(topics=["orders\n"])})


def test_a_tool_s_long_name_is_fitted_unique_and_readable():
    """The lab and the bench make pipeline names of several parts; past the limit they still load."""
    short = "lab_crash_eo_1_12345678"
    assert names.fitted(short) == short
    a = names.fitted("lab_crash_in_kafka_transaction_keo_12_12345678")
    b = names.fitted("lab_crash_in_kafka_transaction_keo_12_12345679")
    assert a != b and a.startswith("lab_crash_in_kafka_transaction")
    assert len(a.encode()) == names.PIPELINE_NAME_BYTES
    assert names.pipeline_name(a, "test") == a
