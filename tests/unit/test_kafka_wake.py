"""Kafka-woken ingest DAGs: the `wake_on_records` declaration and the wake-up's own consumer group."""

from __future__ import annotations

import pytest
import yaml

from eosflow import settings as settings_mod
from eosflow.ingest.pipelines import PipelineConfigError, load_all


def _load(tmp_path, **changes):
    spec = {
        "topics": ["orders"],
        "target_table": "raw.orders",
        "columns": [{"name": "id", "type": "text", "required": True}],
    } | changes
    path = tmp_path / "pipelines.yml"
    path.write_text(yaml.safe_dump({"pipelines": {"p": spec}}))
    return load_all(settings_mod.load(), path)["p"]


def test_waking_is_opt_in_per_pipeline(tmp_path):
    assert _load(tmp_path).wake_on_records is False
    assert _load(tmp_path, wake_on_records=True).wake_on_records is True


@pytest.mark.parametrize("value", ["true", 1, None, "records"])
def test_a_wake_on_records_that_is_not_a_boolean_is_refused_naming_the_fix(tmp_path, value):
    with pytest.raises(PipelineConfigError, match=r"pipeline 'p'.*wake_on_records .* true or false"):
        _load(tmp_path, wake_on_records=value)
