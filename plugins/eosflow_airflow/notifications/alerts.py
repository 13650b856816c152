"""Alerts: when an eosflow task fails for good, say why in one line, where someone will see it.

FailureAlert is every eosflow DAG's task-level on_failure_callback (dags.DEFAULT_ARGS), so it runs once
per task that fails after its retries (a try that will be retried calls on_retry_callback instead). It
always logs the alert at ERROR in the task's log; when EOSFLOW_ALERT_WEBHOOK is set (in the environment
of the Airflow workers, read when the task fails) it also POSTs a small JSON to that URL:

    {"dag_id": ..., "task_id": ..., "run_id": ..., "map_index": ..., "reason": ..., "log_url": ...}

`reason` is the first line of the exception the task failed with: eosflow's tasks end with a line
meant to be read (FENCED: ..., DATA LOSS in pipeline ...: ..., verification of pipeline ... failed:
...). An alert that cannot be sent is logged and never fails the callback: the task already failed
for its own reason.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

from airflow.sdk import BaseNotifier

log = logging.getLogger(__name__)

WEBHOOK_ENV = "EOSFLOW_ALERT_WEBHOOK"
MAX_REASON = 500  # characters; a reason is one line, not a traceback


@dataclass(frozen=True)
class Alert:
    dag_id: str
    task_id: str
    run_id: str
    map_index: int  # -1 unless the task is one of a mapped task's (a backfill chunk)
    reason: str
    log_url: str | None

    def line(self) -> str:
        task = self.task_id + (f"[{self.map_index}]" if self.map_index >= 0 else "")
        return f"eosflow alert: {self.dag_id}.{task} failed in run {self.run_id}: {self.reason}"

    def payload(self) -> bytes:
        return json.dumps(asdict(self)).encode()


def reason(exc: BaseException | str | None, task: Any = None) -> str:
    """The one-line reason: the exception's first non-empty line, or what is known without one."""
    if exc is None:
        return "failed without an exception (killed, lost its worker, or marked failed by hand)"
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    if not first and type(exc).__name__ == "AirflowTaskTimeout":
        limit = getattr(task, "execution_timeout", None)
        first = f"timed out after {limit} (execution_timeout)" if limit else "timed out (execution_timeout)"
    if not first:
        first = type(exc).__name__
    return first if len(first) <= MAX_REASON else first[: MAX_REASON - 3] + "..."


def alert_from(context: Any) -> Alert:
    """The alert for a failed task's callback context (what Airflow passes to on_failure_callback)."""
    ti = context.get("ti") or context.get("task_instance")
    dag_run = context.get("dag_run")
    map_index = getattr(ti, "map_index", None)
    try:
        log_url = ti.log_url if ti is not None else None
    except Exception:  # a link is a nicety: never lose the alert over it
        log_url = None
    return Alert(
        dag_id=str(getattr(ti, "dag_id", None) or getattr(context.get("dag"), "dag_id", "?")),
        task_id=str(getattr(ti, "task_id", None) or getattr(context.get("task"), "task_id", "?")),
        run_id=str(context.get("run_id") or getattr(dag_run, "run_id", "?")),
        map_index=-1 if map_index is None else int(map_index),
        reason=reason(context.get("exception"), context.get("task")),
        log_url=log_url,
    )


def _where(url: str) -> str:
    """The URL without its path or query: webhook URLs often carry their secret there."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def post(url: str, alert: Alert, timeout: float) -> None:
    request = urllib.request.Request(
        url, data=alert.payload(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # the operator's own URL
        response.read()


class FailureAlert(BaseNotifier):
    """The task log at ERROR, and a JSON POST to EOSFLOW_ALERT_WEBHOOK when it is set."""

    def __init__(self, webhook: str | None = None, timeout: float = 10.0):
        super().__init__()
        self.webhook = webhook  # None: EOSFLOW_ALERT_WEBHOOK when the task fails
        self.timeout = timeout

    def notify(self, context: Any) -> None:
        try:
            alert = alert_from(context)
            log.error("%s", alert.line())
            url = self.webhook or os.environ.get(WEBHOOK_ENV, "").strip()
            if not url:
                return
            try:
                post(url, alert, self.timeout)
            except urllib.error.HTTPError as exc:
                log.error(
                    "eosflow alert: the webhook at %s answered %s %s", _where(url), exc.code, exc.reason
                )
            except (OSError, ValueError) as exc:
                log.error("eosflow alert: could not POST to the webhook at %s: %s", _where(url), exc)
            else:
                log.info("eosflow alert sent to %s", _where(url))
        except Exception:  # an alert must never fail the callback
            log.exception("eosflow alert: could not build or send the alert")
