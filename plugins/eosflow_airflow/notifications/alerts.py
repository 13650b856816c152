"""Alerts: when an eosflow task fails for good, say why in one line, where someone will see it.

FailureAlert is every eosflow DAG's task-level on_failure_callback (dags.DEFAULT_ARGS), so it runs once
per task that fails after its retries (a try that will be retried calls on_retry_callback instead). It
always logs the alert at ERROR in the task's log, and POSTs a small JSON to the webhook, read when the task
fails: the `eosflow_alerts` connection (type http), else EOSFLOW_ALERT_WEBHOOK in the worker's environment
(the stand-alone CLI's, and the local stack's), else none:

    {"dag_id": ..., "task_id": ..., "run_id": ..., "map_index": ..., "reason": ..., "log_url": ...}

The connection: host is the webhook's URL up to its secret (`https://hooks.slack.com/services`), password
the secret that ends it (`T000/B000/XXXX`, appended as a path; or `?token=...`, appended as is), extra the
HTTP headers to send (as Airflow's HttpHook reads an http connection's extra). The secret is Airflow's to
mask: it never appears in the connection list, a log line (only scheme, host and port are named), a
template field or the serialized DAG.

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
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow.sdk import BaseNotifier

from eosflow_airflow.hooks.connection_types import defined_connection

log = logging.getLogger(__name__)

WEBHOOK_ENV = "EOSFLOW_ALERT_WEBHOOK"
ALERTS_CONN_ID = "eosflow_alerts"
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
    try:
        parts = urllib.parse.urlsplit(url)
        return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "(a URL that does not parse)"


@dataclass(frozen=True)
class Webhook:
    """Where an alert goes: the URL (secret included) and the headers to send with it."""

    url: str = field(repr=False)  # the path or query often is the secret: never in a repr or a log
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)


def connection_webhook(conn_id: str = ALERTS_CONN_ID) -> Webhook | None:
    """The webhook of the `eosflow_alerts` connection, or None when it is not defined (or has no URL)."""
    conn = defined_connection(conn_id)
    if conn is None:
        return None
    base = str(conn.host or "").strip()
    if base and "://" not in base:
        base = f"{conn.schema or 'https'}://{base}"  # as HttpHook reads a host without a scheme
    if base and conn.port:
        parts = urllib.parse.urlsplit(base)
        if parts.port is None:
            base = urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.netloc}:{conn.port}"))
    secret = str(conn.password or "").strip()
    if secret.startswith(("?", "#")) or not base:
        url = base + secret  # a query token; or, with no host, the whole URL in the password
    else:
        url = base.rstrip("/") + ("/" + secret.lstrip("/") if secret else "")
    if not url:
        return None
    headers = tuple(sorted((str(k), str(v)) for k, v in dict(conn.extra_dejson).items()))
    return Webhook(url, headers)


def resolve_webhook(explicit: str | None = None) -> Webhook | None:
    """The alert's webhook when a task fails: the notifier's own URL, else the `eosflow_alerts`
    connection, else EOSFLOW_ALERT_WEBHOOK (the worker's environment), else none."""
    if explicit:
        return Webhook(explicit)
    found = connection_webhook()
    if found is not None:
        return found
    url = os.environ.get(WEBHOOK_ENV, "").strip()
    return Webhook(url) if url else None


def post(hook: Webhook, alert: Alert, timeout: float) -> None:
    request = urllib.request.Request(
        hook.url,
        data=alert.payload(),
        method="POST",
        headers={"Content-Type": "application/json", **dict(hook.headers)},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:  # the operator's own URL
        response.read()


class FailureAlert(BaseNotifier):
    """The task log at ERROR, and a JSON POST to the webhook (`eosflow_alerts`, or EOSFLOW_ALERT_WEBHOOK)."""

    def __init__(self, webhook: str | None = None, timeout: float = 10.0):
        super().__init__()
        self.webhook = webhook  # None: the connection, else EOSFLOW_ALERT_WEBHOOK, when the task fails
        self.timeout = timeout

    def notify(self, context: Any) -> None:
        try:
            alert = alert_from(context)
            log.error("%s", alert.line())
            hook = resolve_webhook(self.webhook)
            if hook is None:
                return
            try:
                post(hook, alert, self.timeout)
            except urllib.error.HTTPError as exc:
                log.error(
                    "eosflow alert: the webhook at %s answered %s %s", _where(hook.url), exc.code, exc.reason
                )
            except OSError as exc:
                log.error("eosflow alert: could not POST to the webhook at %s: %s", _where(hook.url), exc)
            except ValueError:  # its message quotes the URL, secret and all
                log.error(
                    "eosflow alert: could not POST to the webhook at %s: not a URL urllib can POST to; check "
                    "the eosflow_alerts connection's host and password (or EOSFLOW_ALERT_WEBHOOK)",
                    _where(hook.url),
                )
            else:
                log.info("eosflow alert sent to %s", _where(hook.url))
        except Exception:  # an alert must never fail the callback
            log.exception("eosflow alert: could not build or send the alert")
