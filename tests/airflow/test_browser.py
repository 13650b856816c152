"""In a real browser (Debian's Chromium, driven by Playwright) against a running `airflow standalone`:
log in, open the backfill DAG, fill its Trigger form, trigger it and see the run succeed in the UI."""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the fixture below fails with the fix; a missing browser must not skip silently
    sync_playwright = None

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
UI_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def browser():
    if sync_playwright is None:
        pytest.fail("playwright is not in the venv: `make test` installs it", pytrace=False)
    if not CHROMIUM.is_file():
        pytest.fail(
            f"{CHROMIUM} is missing: `make test` installs it (`make browser`: apt-get install chromium)",
            pytrace=False,
        )
    expect.set_options(timeout=UI_TIMEOUT_MS)  # its own default is 5 s; the UI polls slower than that
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        except PlaywrightError as exc:
            pytest.fail(f"Chromium did not start: {exc}\n`make test` installs it", pytrace=False)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    # Tall enough that the whole Trigger dialog (a modal that scrolls on its own) fits in one screenshot.
    context = browser.new_context(viewport={"width": 1400, "height": 1900})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    yield page
    context.close()


def backfill_dag_id(pipeline_name: str) -> str:
    return f"eosflow_backfill_{pipeline_name}"  # one per pipeline, its name fixed by the DAG


def run_ids(server, dag_id: str, token: str) -> set[str]:
    code, body = server.request(
        "GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-start_date&limit=100", token=token
    )
    assert code == 200, body
    return {run["dag_run_id"] for run in body["dag_runs"]}


def new_run(server, dag_id: str, token: str, before: set[str], timeout: float = 60) -> dict:
    """The run the form created: the one that was not there before the click."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fresh = run_ids(server, dag_id, token) - before
        if fresh:
            assert len(fresh) == 1, fresh
            code, run = server.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{fresh.pop()}", token=token)
            assert code == 200, run
            return run
        time.sleep(1)
    raise AssertionError(f"no new {dag_id} run {timeout}s after the form was submitted")


def log_in(page, server) -> None:
    page.goto(f"{server.base}/")
    expect(page).to_have_url(re.compile(r"/auth/login"))
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(server.password)
    page.get_by_role("button", name="Sign in").click()
    expect(page).not_to_have_url(re.compile(r"/auth/login"))
    expect(page.get_by_role("button", name="User")).to_be_visible()


def choose(page, dialog, field: str, label: str, option: str, value: str | None = None) -> None:
    """Pick an option of an enum param (a searchable select, whose options open in a listbox)."""
    dialog.get_by_role("combobox", name=label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()
    # The value the form sends is kept in a hidden input named after the param.
    expect(dialog.locator(f"input[type=hidden][name=element_{field}]")).to_have_value(value or option)


def open_section(dialog, title: str) -> None:
    """Open a section of the form (an accordion: one section open at a time)."""
    dialog.get_by_role("button", name=title, exact=True).click()


def fill_backfill_form(page, pipeline_name: str):
    """Open the Trigger dialog of the pipeline's backfill DAG page, fill the params; return the dialog."""
    page.get_by_role("button", name="Trigger Dag").click()
    dialog = page.get_by_role("dialog").filter(
        has=page.get_by_role("heading", name=f"Trigger Dag - {backfill_dag_id(pipeline_name)}")
    )
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("radio", name="Single Run")).to_be_checked()
    # Titles, not raw names; the params without a section ("Run Parameters") are open at first. No
    # pipeline to choose: the DAG is the pipeline's own.
    expect(dialog.get_by_role("combobox", name="Mode", exact=True)).to_be_visible()
    expect(dialog.get_by_role("combobox", name="Pipeline", exact=True)).to_have_count(0)

    choose(page, dialog, "mode", "Mode", "Replay: re-read and re-commit offsets already committed", "replay")
    # String params' labels are not tied to their inputs (no accessible name): use the input's name.
    partitions = dialog.locator("input[name=element_partitions]")
    partitions.fill("0")
    expect(partitions).to_have_value("0")
    expect(dialog.locator("input[name=element_dry_run]")).not_to_be_checked()  # a real run by default
    open_section(dialog, "Range by offset (empty: everything)")
    for offset in ("From offset", "To offset (exclusive)"):
        expect(dialog.get_by_role("spinbutton", name=offset, exact=True)).to_have_value("")
    open_section(dialog, "Topic and chunk size")
    chunk_size = dialog.get_by_role("spinbutton", name="Chunk size (offsets per Spark job)", exact=True)
    chunk_size.fill("250")
    chunk_size.press("Tab")
    expect(chunk_size).to_have_value("250")
    return dialog


def test_backfill_triggered_from_the_browser_form_succeeds(airflow_server, page):
    """Over a minute with its set-up: Chromium starts, the form is filled as a person fills it, and the
    backfill it triggers runs for real (plan, Spark, verify) in the standalone before the run is seen to
    succeed."""
    server, pipeline = airflow_server
    ARTIFACTS.mkdir(exist_ok=True)
    token = server.token()
    ledger_before = pipeline.ledger()
    committed = [row for row in ledger_before if row[0] == 0 and row[3] in ("data", "lost")]
    assert committed, ledger_before
    first, end = min(row[1] for row in committed), max(row[2] for row in committed)

    dag_id = backfill_dag_id(pipeline.name)
    log_in(page, server)
    page.goto(f"{server.base}/dags/{dag_id}")
    expect(page.get_by_role("heading", name=dag_id)).to_be_visible()
    dialog = fill_backfill_form(page, pipeline.name)
    page.screenshot(path=str(ARTIFACTS / "airflow-backfill-form.png"), full_page=True)

    submit = dialog.get_by_role("button", name="Trigger", exact=True)
    expect(
        submit,
        "Trigger stays disabled while a param the form marks required is empty; a param that may be left "
        'empty needs type=["null", ...] in plugins/eosflow_airflow/dags.py (see the form screenshot)',
    ).to_be_enabled()
    before = run_ids(server, dag_id, token)
    submit.click()
    expect(dialog).to_be_hidden()
    run = new_run(server, dag_id, token, before)
    run_id = run["dag_run_id"]
    conf = dict(run["conf"])
    assert not conf.pop("from_time", None) and not conf.pop("to_time", None), run["conf"]  # left empty
    assert conf == {
        "mode": "replay",
        "topic": None,  # left empty: the pipeline's only topic
        "partitions": "0",
        "from_offset": None,
        "to_offset": None,
        "chunk_size": 250,
        "dry_run": False,
    }, json.dumps(run["conf"])

    assert server.wait_for_run(dag_id, run_id) == "success", server.log_tail()

    page.goto(f"{server.base}/dags/{dag_id}/runs/{run_id}")
    title = page.get_by_role("heading", name=run_id, exact=True)
    expect(title).to_be_visible()
    # The run's state badge sits beside its title (the task instances below have badges of their own).
    expect(title.locator("xpath=..").get_by_test_id("state-badge")).to_have_text("Success")
    chunks = math.ceil((end - first) / 250)
    mapped = page.get_by_role("row").filter(has=page.get_by_role("link", name="spark_chunk", exact=True))
    expect(mapped).to_have_count(chunks)  # one mapped Spark job per chunk of 250 offsets
    for row in mapped.all():
        expect(row.get_by_role("cell", name="Success", exact=True)).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "airflow-backfill-trigger.png"), full_page=True)

    replays = list((Counter(pipeline.ledger()) - Counter(ledger_before)).elements())  # the rows it added
    assert replays and all(row[0] == 0 and row[3] == "replay" for row in replays), replays
    replays.sort(key=lambda row: row[1])
    assert replays[0][1] == first and replays[-1][2] == end, (first, end, replays)
    assert all(a[2] == b[1] for a, b in pairwise(replays)), replays  # contiguous, in order
    assert all(row[2] - row[1] <= 250 for row in replays), replays  # chunk_size took effect
    assert len(replays) == chunks, replays
    assert all(row[4] == row[5] + row[6] for row in replays), replays
    assert pipeline.violations() == []
