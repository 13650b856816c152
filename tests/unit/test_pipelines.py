"""The pipelines file's rules: every refusal names the file, the pipeline, the key and what would work."""

from __future__ import annotations

import pytest
import yaml

from eosflow import settings as settings_mod
from eosflow.pipelines import InitialOffset, PipelineConfigError, load_all


def _write(tmp_path, pipelines: dict) -> object:
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": pipelines}))
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
