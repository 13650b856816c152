"""The failure alert: one line saying why, in the task log and POSTed to the webhook (the `eosflow_alerts`
connection, else EOSFLOW_ALERT_WEBHOOK)."""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace

import pytest

from eosflow_airflow.notifications import alerts


class _Ti(SimpleNamespace):
    pass


def _context(exc, map_index=-1, task=None):
    ti = _Ti(
        dag_id="eosflow_ingest_orders",
        task_id="spark_ingest",
        map_index=map_index,
        log_url="http://127.0.0.1:8080/dags/eosflow_ingest_orders/runs/r1/tasks/spark_ingest",
    )
    return {"ti": ti, "run_id": "manual__r1", "exception": exc, "task": task}


def test_the_reason_is_the_exception_s_first_line():
    exc = RuntimeError("FENCED: batch b-2 of orders was fenced by b-3 (exit 3, not retried)\nTraceback ...\n")
    assert alerts.reason(exc) == "FENCED: batch b-2 of orders was fenced by b-3 (exit 3, not retried)"
    assert alerts.reason(ValueError("\n\n  first real line  \nsecond")) == "first real line"


def test_a_reason_without_a_message_names_the_exception_or_the_timeout():
    assert alerts.reason(KeyError()) == "KeyError"
    assert alerts.reason(None).startswith("failed without an exception")

    from airflow.sdk.exceptions import AirflowTaskTimeout

    task = SimpleNamespace(execution_timeout=timedelta(hours=2))
    assert alerts.reason(AirflowTaskTimeout(), task) == "timed out after 2:00:00 (execution_timeout)"


def test_a_long_reason_is_cut_to_one_readable_line():
    text = alerts.reason(RuntimeError("x" * 5000))
    assert len(text) == alerts.MAX_REASON and text.endswith("...")


def test_the_alert_names_the_dag_task_run_and_log():
    alert = alerts.alert_from(_context(RuntimeError("DATA LOSS in pipeline 'orders': gone\nmore"), 3))
    assert alert == alerts.Alert(
        dag_id="eosflow_ingest_orders",
        task_id="spark_ingest",
        run_id="manual__r1",
        map_index=3,
        reason="DATA LOSS in pipeline 'orders': gone",
        log_url="http://127.0.0.1:8080/dags/eosflow_ingest_orders/runs/r1/tasks/spark_ingest",
    )
    assert alert.line() == (
        "eosflow alert: eosflow_ingest_orders.spark_ingest[3] failed in run manual__r1: "
        "DATA LOSS in pipeline 'orders': gone"
    )
    assert json.loads(alert.payload()) == {
        "dag_id": "eosflow_ingest_orders",
        "task_id": "spark_ingest",
        "run_id": "manual__r1",
        "map_index": 3,
        "reason": "DATA LOSS in pipeline 'orders': gone",
        "log_url": alert.log_url,
    }


def test_without_a_webhook_the_alert_is_logged_at_error(caplog, monkeypatch):
    monkeypatch.delenv(alerts.WEBHOOK_ENV, raising=False)
    with caplog.at_level(logging.INFO, logger=alerts.__name__):
        alerts.FailureAlert()(_context(RuntimeError("verification of pipeline orders failed: I3")))
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert record.getMessage().endswith(
        "failed in run manual__r1: verification of pipeline orders failed: I3"
    )


class _Receiver:
    """A real HTTP server on a free port that keeps what was POSTed to it."""

    def __init__(self, status: int = 204):
        received = self.received = []
        self.headers_seen: list[dict[str, str]] = []
        self_ = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.path, self.headers["Content-Type"], json.loads(body)))
                self_.headers_seen.append(dict(self.headers))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/secret-token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = _Receiver()
    yield r
    r.close()


def test_with_a_webhook_the_alert_is_posted_as_json(receiver, monkeypatch, caplog):
    monkeypatch.setenv(alerts.WEBHOOK_ENV, receiver.url)
    with caplog.at_level(logging.INFO, logger=alerts.__name__):
        alerts.FailureAlert()(_context(RuntimeError("refused: bad request\ndetails")))
    [(path, content_type, body)] = receiver.received
    assert path == "/hooks/secret-token" and content_type == "application/json"
    assert body["reason"] == "refused: bad request" and body["task_id"] == "spark_ingest"
    assert "secret-token" not in caplog.text  # the URL's path is often the webhook's secret


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/nothing-listens", "not a url", "http://[::1"])
def test_a_webhook_that_cannot_be_reached_never_fails_the_callback(url, caplog):
    with caplog.at_level(logging.ERROR, logger=alerts.__name__):
        alerts.FailureAlert(webhook=url, timeout=2)(_context(RuntimeError("the reason")))
    assert "the reason" in caplog.text  # still in the task log
    assert "could not" in caplog.text


def test_a_webhook_answering_an_error_never_fails_the_callback(caplog):
    failing = _Receiver(status=500)
    try:
        with caplog.at_level(logging.ERROR, logger=alerts.__name__):
            alerts.FailureAlert(webhook=failing.url)(_context(RuntimeError("the reason")))
    finally:
        failing.close()
    assert len(failing.received) == 1
    assert "answered 500" in caplog.text and "secret-token" not in caplog.text


def _alerts_connection(monkeypatch, **fields) -> None:
    """The `eosflow_alerts` connection as a secrets backend gives it (Airflow reads AIRFLOW_CONN_*)."""
    monkeypatch.setenv("AIRFLOW_CONN_EOSFLOW_ALERTS", json.dumps({"conn_type": "http", **fields}))


def test_the_eosflow_alerts_connection_is_the_webhook_its_password_the_secret_end_of_the_url(
    receiver, monkeypatch, caplog
):
    """host: the URL up to its secret; password: the secret, appended as a path; extra: headers. The
    connection wins over the worker's EOSFLOW_ALERT_WEBHOOK, and no log line holds the secret."""
    base = receiver.url.removesuffix("/secret-token")  # http://127.0.0.1:<port>/hooks
    _alerts_connection(monkeypatch, host=base, password="secret-token", extra={"X-Alert-Key": "key-1"})
    monkeypatch.setenv(alerts.WEBHOOK_ENV, "http://127.0.0.1:9/the-environment-s")  # the fallback only
    with caplog.at_level(logging.INFO, logger=alerts.__name__):
        alerts.FailureAlert()(_context(RuntimeError("FENCED: batch b-2 was fenced\ndetails")))
    [(path, content_type, body)] = receiver.received
    assert path == "/hooks/secret-token" and content_type == "application/json"
    assert body["reason"] == "FENCED: batch b-2 was fenced"
    assert receiver.headers_seen[0]["X-Alert-Key"] == "key-1"
    assert "alert sent to http://127.0.0.1:" in caplog.text and "secret-token" not in caplog.text


def test_a_connection_s_secret_may_be_a_query_and_its_host_take_schema_and_port(
    receiver, monkeypatch, caplog
):
    port = receiver.server.server_port
    _alerts_connection(
        monkeypatch, host="127.0.0.1", schema="http", port=port, password="?token=secret-token"
    )
    with caplog.at_level(logging.INFO, logger=alerts.__name__):
        alerts.FailureAlert()(_context(RuntimeError("the reason")))
    [(path, _, body)] = receiver.received
    assert path == "/?token=secret-token" and body["reason"] == "the reason"
    assert "secret-token" not in caplog.text


def test_a_connection_holding_a_bad_url_is_logged_without_its_secret_and_never_fails_the_callback(
    monkeypatch, caplog
):
    _alerts_connection(monkeypatch, password="htp:/nowhere/secret-token")  # no host: the password is all
    with caplog.at_level(logging.ERROR, logger=alerts.__name__):
        alerts.FailureAlert(timeout=2)(_context(RuntimeError("the reason")))
    assert "the reason" in caplog.text and "could not POST" in caplog.text
    assert "secret-token" not in caplog.text


def test_without_the_connection_the_worker_s_environment_is_the_webhook(receiver, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_EOSFLOW_ALERTS", raising=False)
    assert "AIRFLOW_CONN_EOSFLOW_ALERTS" not in os.environ
    monkeypatch.setenv(alerts.WEBHOOK_ENV, receiver.url)
    alerts.FailureAlert()(_context(RuntimeError("the reason")))
    assert [path for path, _, _ in receiver.received] == ["/hooks/secret-token"]
