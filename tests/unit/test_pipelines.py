"""The pipelines file's rules: every refusal names the file, the pipeline, the key and what would work."""

from __future__ import annotations

import pytest
import yaml

from eosflow import settings as settings_mod
from eosflow.pipelines import InitialOffset, PipelineConfigError, load, load_all, load_each
from eosflow.publish.declaration import load_publishers


def _write(tmp_path, pipelines: dict) -> object:
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": pipelines}, sort_keys=False))
    return path


def _spec(**changes) -> dict:
    return {
        "topics": ["orders"],
        "target_table": "raw.orders",
        "columns": [{"name": "id", "type": "text", "required": True}],
    } | changes


def test_a_negative_initial_offset_is_refused_with_the_forms_that_work():
    with pytest.raises(PipelineConfigError, match=r"offset:-1.*offset:<n>"):
        InitialOffset.parse("offset:-1", "pipelines.yml: pipeline 'p'")
    assert InitialOffset.parse("offset:0", "here") == InitialOffset("offset", 0)


@pytest.mark.parametrize("table", ["eosflow.orders", "staging.orders", "pg_catalog.orders"])
def test_a_target_inside_the_warehouse_s_own_schemas_is_refused(tmp_path, table):
    path = _write(tmp_path, {"p": _spec(target_table=table)})
    with pytest.raises(PipelineConfigError, match=f"pipeline 'p'.*{table}.*schema"):
        load_all(settings_mod.load(), path)


def test_two_pipelines_writing_one_table_are_refused_naming_both(tmp_path):
    path = _write(tmp_path, {"a": _spec(), "b": _spec(topics=["other"])})
    with pytest.raises(PipelineConfigError, match=r"'a' and 'b'.*raw\.orders"):
        load_all(settings_mod.load(), path)


def test_the_project_s_own_pipelines_file_loads():
    assert "orders" in load_all(settings_mod.load())


@pytest.mark.parametrize("version", ["v1\x00", "", "two\nlines", "x" * 101])
def test_a_transform_version_every_row_could_not_carry_is_refused(tmp_path, version):
    path = _write(tmp_path, {"p": _spec(transform_version=version)})
    with pytest.raises(PipelineConfigError, match="transform_version .* printable"):
        load_all(settings_mod.load(), path)


# ---- a name declared twice (YAML would keep the last silently)


def test_a_pipeline_declared_twice_is_refused_naming_it_and_its_lines(tmp_path):
    path = tmp_path / "pipelines.yml"
    one = yaml.safe_dump({"orders": _spec()}, sort_keys=False)
    other = yaml.safe_dump({"orders": _spec(target_table="raw.other")}, sort_keys=False)
    path.write_text("pipelines:\n" + _indent(one) + _indent(other))
    second = 2 + one.count("\n")
    with pytest.raises(PipelineConfigError, match=rf"'orders' is declared twice, on lines 2 and {second}"):
        load_all(settings_mod.load(), path)


def test_a_publisher_declared_twice_is_refused(tmp_path):
    path = tmp_path / "pipelines.yml"
    outbox = "    table: outbox.o\n    topic: o.out\n    id: id\n"
    pipelines = yaml.safe_dump({"pipelines": {"p": _spec()}})
    path.write_text(pipelines + "publishers:\n  o:\n" + outbox + "  o:\n" + outbox)
    with pytest.raises(PipelineConfigError, match=r"'o' is declared twice"):
        load_publishers(settings_mod.load(), path)
    with pytest.raises(PipelineConfigError, match=r"'o' is declared twice"):
        load_each(settings_mod.load(), path)  # the file is wrong for every reader


def test_a_setting_declared_twice_is_refused_and_anchors_still_merge(tmp_path):
    path = tmp_path / "pipelines.yml"
    base = "    topics: [orders]\n    columns: [{name: id, type: text}]\n"
    path.write_text("pipelines:\n  p:\n" + base + "    target_table: raw.a\n    target_table: raw.b\n")
    with pytest.raises(PipelineConfigError, match=r"'target_table' is declared twice, on lines 5 and 6"):
        load_all(settings_mod.load(), path)
    merged = "  p: &p\n" + base + "    target_table: raw.a\n  q:\n    <<: *p\n    target_table: raw.b\n"
    path.write_text("pipelines:\n" + merged)
    assert load_all(settings_mod.load(), path)["q"].target_table == "raw.b"


def _indent(text: str) -> str:
    return "".join("  " + line + "\n" for line in text.splitlines())


# ---- numbers: bounded, whole where whole, and no true for 1


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_records_per_partition", 10**20, r"<= 1,000,000,000 \(one Spark task"),
        ("max_records_per_partition", 1.0e20, r"not 1e\+20 \(a float"),
        ("max_records_per_partition", 1000.0, r"not 1000.0 \(a float"),
        ("max_records_per_partition", True, r"not True \(true/false is not a number\)"),
        ("max_records_per_partition", 0, r">= 1 and"),
        ("max_value_bytes", 2**30 + 1, r"<= 1,073,741,824 \(a value is stored whole, and Postgres"),
        ("max_value_bytes", "64k", r"not '64k'"),
    ],
)
def test_a_number_out_of_its_bounds_is_refused_with_the_bounds(tmp_path, key, value, message):
    path = _write(tmp_path, {"p": _spec(**{key: value})})
    with pytest.raises(PipelineConfigError, match=f"pipeline 'p': {key} must be a whole number.*{message}"):
        load_all(settings_mod.load(), path)


def test_the_largest_numbers_are_taken(tmp_path):
    path = _write(tmp_path, {"p": _spec(max_records_per_partition=10**9, max_value_bytes=2**30)})
    p = load_all(settings_mod.load(), path)["p"]
    assert (p.max_records_per_partition, p.max_value_bytes) == (10**9, 2**30)


def test_an_initial_offset_beyond_kafka_s_is_refused():
    with pytest.raises(PipelineConfigError, match=r"offset:<n> \(0 <= n < 2\^63"):
        InitialOffset.parse(f"offset:{2**63}", "here")
    assert InitialOffset.parse(f"offset:{2**63 - 1}", "here").value == 2**63 - 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"transaction_timeout_ms": 10**12}, r"transaction_timeout_ms must be .*<= 86,400,000"),
        ({"transaction_timeout_ms": 60_000.0}, r"transaction_timeout_ms .*a float"),
    ],
)
def test_a_kafka_sink_s_numbers_are_bounded(tmp_path, change, message):
    spec = {k: v for k, v in _spec(sink="kafka", output_topic="out").items() if k != "target_table"}
    with pytest.raises(PipelineConfigError, match=message):
        load_all(settings_mod.load(), _write(tmp_path, {"p": spec | change}))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch_rows": 10**9}, r"batch_rows must be a whole number >= 1 and <= 1,000,000"),
        ({"batch_rows": 50.0}, r"batch_rows .*a float"),
        ({"batch_rows": True}, r"batch_rows .*true/false"),
        ({"batch_seconds": float("inf")}, r"batch_seconds must be a number > 0 and <= 3,600"),
        ({"batch_seconds": float("nan")}, r"batch_seconds must be a number > 0 and <= 3,600"),
    ],
)
def test_a_publisher_s_numbers_are_bounded(tmp_path, change, message):
    path = tmp_path / "pipelines.yml"
    outbox = {"table": "outbox.o", "topic": "o.out", "id": "id"} | change
    path.write_text(yaml.safe_dump({"pipelines": {"p": _spec()}, "publishers": {"o": outbox}}))
    with pytest.raises(PipelineConfigError, match=f"publisher 'o': {message}"):
        load_publishers(settings_mod.load(), path)


# ---- one bad pipeline does not hide the others


def test_load_each_keeps_the_good_pipelines_and_says_why_each_bad_one_is_refused(tmp_path):
    path = _write(
        tmp_path,
        {
            "good": _spec(),
            "bad_table": _spec(topics=["b"], target_table="eosflow.ledger"),
            "late_writer": _spec(topics=["c"]),  # raw.orders again: the later one is refused
            "Bad": _spec(topics=["d"], target_table="raw.d"),
            "also_good": _spec(topics=["e"], target_table="raw.e"),
        },
    )
    found, refused = load_each(settings_mod.load(), path)
    assert sorted(found) == ["also_good", "good"]
    assert sorted(refused) == ["Bad", "bad_table", "late_writer"]
    assert "eosflow's own" in str(refused["bad_table"])
    assert "'good' and 'late_writer' both write raw.orders" in str(refused["late_writer"])
    assert "lower-case letters" in str(refused["Bad"])
    # load_all still raises, the first refusal in the file's order.
    with pytest.raises(PipelineConfigError, match="bad_table"):
        load_all(settings_mod.load(), path)


@pytest.mark.parametrize(
    "text",
    ["pipelines: [a, b]\n", "pipelines: {a: 1\n", "publishers: {}\n"],
    ids=["not a mapping", "not YAML", "no pipelines"],
)
def test_load_each_raises_what_is_wrong_with_the_file_itself(tmp_path, text):
    path = tmp_path / "pipelines.yml"
    path.write_text(text)
    with pytest.raises(PipelineConfigError, match=str(path)):
        load_each(settings_mod.load(), path)
    with pytest.raises(PipelineConfigError, match="no pipelines file"):
        load_each(settings_mod.load(), tmp_path / "missing.yml")


def test_load_of_one_pipeline_is_not_stopped_by_another_s_error(tmp_path):
    # A task of a good pipeline's DAG loads its pipeline by name: a bad sibling must not fail it.
    path = _write(tmp_path, {"bad": _spec(target_table="staging.x"), "good": _spec(topics=["g"])})
    assert load(settings_mod.load(), "good", path).target_table == "raw.orders"
    with pytest.raises(PipelineConfigError, match="pipeline 'bad'.*staging"):
        load(settings_mod.load(), "bad", path)
    with pytest.raises(
        PipelineConfigError, match=r"unknown pipeline 'nope'.*declares: good \(refused: bad\)"
    ):
        load(settings_mod.load(), "nope", path)


@pytest.mark.parametrize(
    "stamp", ["1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.998Z", "0001-01-01T00:00:00Z"]
)
def test_an_initial_timestamp_before_1970_is_refused(stamp):
    # Kafka reads -1 and -2 as "latest" and "earliest": 1 ms before 1970 would start at the end.
    with pytest.raises(PipelineConfigError, match=r"timestamp:<ISO-8601 with zone.*from 1970"):
        InitialOffset.parse(f"timestamp:{stamp}", "here")
    assert InitialOffset.parse("timestamp:1970-01-01T00:00:00Z", "here").value == 0


def test_a_pipeline_reports_its_lag_to_eosflow_dot_its_name_unless_told_otherwise(tmp_path):
    path = _write(
        tmp_path,
        {
            "a": _spec(),
            "b": _spec(topics=["b"], target_table="raw.b", consumer_group="team.b-lag_1"),
            "c": _spec(topics=["c"], target_table="raw.c", consumer_group=False),
        },
    )
    found = load_all(settings_mod.load(), path)
    assert {n: p.consumer_group for n, p in found.items()} == {
        "a": "eosflow.a",
        "b": "team.b-lag_1",
        "c": None,
    }


@pytest.mark.parametrize(
    "group", ["eosflow.other", "has space", "semi;colon", "", "x" * 250, 17, True, ["a"], "../up"]
)
def test_a_consumer_group_eosflow_did_not_validate_is_refused_saying_what_is_allowed(tmp_path, group):
    path = _write(tmp_path, {"p": _spec(consumer_group=group)})
    with pytest.raises(PipelineConfigError, match=r"pipeline 'p'.*consumer_group .*letters, digits.*false"):
        load_all(settings_mod.load(), path)


def test_two_pipelines_reporting_to_one_group_are_refused_naming_both(tmp_path):
    path = _write(
        tmp_path,
        {
            "a": _spec(consumer_group="team.lag"),
            "b": _spec(topics=["b"], target_table="raw.b", consumer_group="team.lag"),
        },
    )
    with pytest.raises(PipelineConfigError, match=r"'a' and 'b' both report to consumer group 'team.lag'"):
        load_all(settings_mod.load(), path)


def test_a_kafka_sink_takes_no_consumer_group_its_own_holds_its_positions(tmp_path):
    spec = {k: v for k, v in _spec(sink="kafka", output_topic="out").items() if k != "target_table"}
    assert load_all(settings_mod.load(), _write(tmp_path, {"p": spec}))["p"].consumer_group is None
    with pytest.raises(PipelineConfigError, match=r"consumer group 'eosflow.p'.*remove consumer_group"):
        load_all(settings_mod.load(), _write(tmp_path, {"p": spec | {"consumer_group": "team.p"}}))
