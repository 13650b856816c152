"""When a stream is unhealthy, and the declaration of stream pipelines."""

from __future__ import annotations

import pytest
import yaml

from eosflow.observe.health import PipelineHealth, judge
from eosflow.pipelines import PipelineConfigError, PipelineMode, load_all
from tests import orders


@pytest.mark.parametrize(
    ("lag", "age", "healthy"),
    [
        (0, None, True),  # never committed, nothing waits: a new idle stream
        (0, 3600.0, True),  # idle for an hour, nothing waits
        (10, 60.0, True),  # records wait, the stream committed a minute ago: keeping up
        (10, 300.0, True),  # exactly at the limit
        (10, 301.0, False),  # records wait, nothing committed for longer than the limit
        (1, None, False),  # records wait, the stream never committed: not running
    ],
)
def test_a_stream_is_stale_only_when_records_wait_and_it_has_not_committed_within_the_limit(
    lag, age, healthy
):
    assert (judge(lag, age, 300.0) is None) is healthy


def test_the_reason_names_the_lag_the_silence_and_the_fix():
    line = PipelineHealth("orders", 1234, 900.0, 300.0).line()
    assert line.startswith("pipeline orders: lag 1,234, last stream commit 900s ago: STALE")
    assert "has not committed for 900s (limit 300s)" in line and "systemctl status eosflow-stream@" in line
    assert PipelineHealth("orders", 0, None, 300.0).line().endswith("last stream commit never: healthy")


def _declare(tmp_path, **changes):
    path = tmp_path / "pipelines.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "pipelines": {
                    "p": {"topics": ["t"], "target_table": "raw.p", **orders.declaration(), **changes}
                }
            }
        )
    )
    return path


def test_mode_is_batch_by_default_and_stream_when_declared(tmp_path):
    assert load_all(None, _declare(tmp_path))["p"].mode == "batch"
    assert load_all(None, _declare(tmp_path, mode="stream"))["p"].mode == "stream"


def test_mode_is_parsed_once_into_a_member_shown_as_its_text(tmp_path):
    batch, stream = (load_all(None, _declare(tmp_path, mode=m))["p"].mode for m in ("batch", "stream"))
    assert (batch, stream) == (PipelineMode.BATCH, PipelineMode.STREAM) and isinstance(stream, PipelineMode)
    assert f"({stream})" == "(stream)"  # as the view shows it


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mode": "streaming"}, r"mode 'streaming' must be one of \['batch', 'stream'\]"),
        (
            {"mode": "stream", "wake_on_records": True},
            "leave wake_on_records out, or make the pipeline mode: batch",
        ),
    ],
)
def test_a_wrong_mode_is_refused_naming_the_fix(tmp_path, changes, message):
    with pytest.raises(PipelineConfigError, match=message):
        load_all(None, _declare(tmp_path, **changes))


def test_a_batch_pipeline_s_reason_points_at_its_ingest_dag():
    line = PipelineHealth("clicks", 40, None, 900.0, mode="batch").line()
    assert line.startswith(
        "pipeline clicks: lag 40, last commit never: STALE: 40 records wait and the pipeline"
    )
    assert "has never committed (limit 900s)" in line and "eosflow_ingest_clicks paused" in line
    assert PipelineHealth("clicks", 40, 899.0, 900.0, mode="batch").ok
