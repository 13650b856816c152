"""The eosflow view in a real browser (Debian's Chromium, Playwright), after the demo: log in to Airflow,
open "eosflow pipelines" from the navigation, and see the demo pipeline's partitions, lag and invariants."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys

import pytest

from eosflow import pipelines
from eosflow_dev.produce import events
from eosflow_dev.produce.producer import Delivery, EventProducer, produce_stream
from eosflow_dev.stack import airflow_server as standalone
from tests.airflow.test_browser import ARTIFACTS, browser, log_in, page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def after_the_demo(running_stack, tmp_path_factory):
    """What `make demo` then `make airflow` leave: the demo's orders committed and verified, and Airflow
    with the project's pipelines.yml (its DAGs paused: the view is what is looked at)."""
    demo = subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "demo", "--no-round-trip"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert demo.returncode == 0 and "EXACTLY ONCE" in demo.stdout, demo.stdout[-3000:] + demo.stderr[-3000:]
    orders = pipelines.load(running_stack, "orders")
    seed = secrets.randbits(31)  # new event ids: the next demo ingests these too
    producer = EventProducer(running_stack.kafka, orders.topic, Delivery(), seed=seed)
    produce_stream(producer, events.generate(seed, 60), seed)  # some lag to show
    server = standalone.start(
        running_stack,
        tmp_path_factory.mktemp("demo-airflow") / "state",
        running_stack.root / "pipelines.yml",
        env={"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"},
    )
    yield server, orders
    standalone.stop(server)


def test_the_view_shows_the_demo_pipeline_in_the_airflow_ui(after_the_demo, page):  # noqa: F811
    """Slow in its fixture: `eosflow demo` (ingest, verify with dbt) and an Airflow standalone start before
    the browser opens the view; the browser part takes seconds."""
    from playwright.sync_api import expect

    server, orders = after_the_demo
    page.set_viewport_size({"width": 1400, "height": 1500})
    log_in(page, server)
    page.get_by_role("button", name=re.compile("Browse")).click()
    page.get_by_role("menuitem", name="eosflow pipelines").click()
    expect(page).to_have_url(re.compile(r"/plugin/eosflow"))
    view = page.frame_locator("iframe")
    expect(view.locator("h2#orders")).to_contain_text(orders.topic)
    partitions = view.locator("h2#orders ~ table.partitions").first
    for partition in range(6):  # the demo's topic has six
        expect(partitions).to_contain_text(f"{orders.topic}[{partition}]")
    expect(view.get_by_text("invariants hold").first).to_be_visible()
    expect(view.locator("table.checks").first).to_contain_text("unique_kafka_coordinates")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "eosflow-view.png"), full_page=True)  # docs/images has one
