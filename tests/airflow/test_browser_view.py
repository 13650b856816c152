"""The eosflow view in a real browser (Debian's Chromium, Playwright): log in to Airflow, open "eosflow
pipelines" from the navigation, and see a pipeline's partitions, lag and invariants.

On the suite's shared Airflow (`airflow_server`, whose pipeline has committed data): this test ran the whole
demo and an Airflow of its own once (about 100 s of the suite); `make demo` is checked on a fresh clone, and
the view's content by tests/airflow/test_eosflow_view.py."""

from __future__ import annotations

import re

import pytest

from eosflow.verify import verify_pipeline
from tests.airflow.test_browser import ARTIFACTS, browser, log_in, page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration


def test_the_view_shows_a_pipeline_in_the_airflow_ui(airflow_server, page, monkeypatch):  # noqa: F811
    from playwright.sync_api import expect

    server, pipeline = airflow_server
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(pipeline.config_path))
    # The invariants alone, as the ingest DAG checks them (the server's marts DAG may be building the marts).
    assert verify_pipeline(pipeline.settings, pipeline.name, marts=False).ok  # recorded in eosflow.checks
    pipeline.produce(40, seed=507, partitions=2)  # some lag to show
    page.set_viewport_size({"width": 1400, "height": 1500})
    log_in(page, server)
    page.get_by_role("button", name=re.compile("Browse")).click()
    page.get_by_role("menuitem", name="eosflow pipelines").click()
    expect(page).to_have_url(re.compile(r"/plugin/eosflow"))
    view = page.frame_locator("iframe")
    heading = view.locator(f"h2[id='{pipeline.name}']")
    expect(heading).to_contain_text(pipeline.topic)
    partitions = view.locator(f"h2[id='{pipeline.name}'] ~ table.partitions").first
    for partition in range(2):  # the shared pipeline's topic has two
        expect(partitions).to_contain_text(f"{pipeline.topic}[{partition}]")
    expect(view.get_by_text("invariants hold").first).to_be_visible()
    expect(view.locator("table.checks").first).to_contain_text("unique_kafka_coordinates")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "eosflow-view.png"), full_page=True)
