"""The eosflow view's page: the pipelines' state as HTML (pure: states in, text out).

Plain server-rendered HTML with a little CSS and inline SVG charts, so the page needs no build step and
no script; it lives in Airflow's navigation as an external view (an iframe of /eosflow/).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from urllib.parse import urlencode

from eosflow.observe.state import PipelineState, PublisherState, now

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.2rem; color: #1f2937; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.15rem; margin-top: 2rem; } h3 { font-size: 1rem; }
table { border-collapse: collapse; margin: .4rem 0 1rem; font-size: .85rem; }
th, td { border-bottom: 1px solid #e5e7eb; padding: .25rem .6rem; text-align: right; }
th { background: #f3f4f6; } td.l, th.l { text-align: left; }
.ok { color: #047857; font-weight: 600; } .bad { color: #b91c1c; font-weight: 600; }
.muted { color: #6b7280; } .card { display: inline-block; margin-right: 1.5rem; }
.card b { display: block; font-size: 1.2rem; } nav a { margin-right: .6rem; }
.chart { display: inline-block; margin: 0 2rem .8rem 0; vertical-align: top; }
.chart svg { display: block; background: #f9fafb; border-bottom: 1px solid #9ca3af; }
.axis { display: flex; justify-content: space-between; font-size: .7rem; color: #6b7280; }
pre { background: #f9fafb; padding: .4rem; font-size: .75rem; white-space: pre-wrap; }
"""


def page(
    states: list[PipelineState], partition: int | None = None, publishers: Sequence[PublisherState] = ()
) -> str:
    body = [f"<h1>eosflow pipelines</h1><p class='muted'>as of {_when(now())}</p>"]
    if not states:
        body.append("<p>No pipeline is declared (pipelines.yml).</p>")
    body += [_pipeline(s, partition) for s in states]
    if publishers:
        body.append(_publishers(publishers))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>eosflow</title>"
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>"
    )


def _pipeline(s: PipelineState, partition: int | None) -> str:
    p = s.pipeline
    output = p.sink.output
    checks = s.checks_ok
    verdict = (
        "<span class='muted'>never verified</span>"
        if checks is None
        else (
            "<span class='ok'>invariants hold</span>" if checks else "<span class='bad'>CHECKS FAILING</span>"
        )
    )
    health = s.health
    cards = [
        ("lag", f"{s.lag:,} records"),
        ("last commit", _ago(s.last_commit)),
        ("read", f"{s.totals.get('read', 0):,}"),
        ("rejected", f"{s.totals.get('rejected', 0):,}"),
        ("checks", verdict),
        (
            "health",
            "<span class='muted'>not judged</span>"
            if health is None
            else ("<span class='ok'>keeping up</span>" if health.ok else "<span class='bad'>STALE</span>"),
        ),
    ]
    parts = [
        f"<h2 id='{escape(p.name)}'>{escape(p.name)} <span class='muted'>"
        f"{escape(', '.join(p.topics))} &rarr; {escape(output)} ({escape(p.mode)})</span></h2>",
        "".join(f"<div class='card'><span class='muted'>{k}</span><b>{v}</b></div>" for k, v in cards),
    ]
    if s.kafka_error:
        parts.append(f"<p class='bad'>Kafka did not answer: {escape(s.kafka_error)}</p>")
    if health is not None and not health.ok:
        parts.append(f"<p class='bad'>{escape(health.line())}</p>")  # what eosflow_health fails with
    parts.append(_partitions(s))
    parts.append(_chart(s))
    parts.append(_checks(s))
    parts.append(_plans(s))
    parts.append(_ranges(s, partition))
    return "".join(parts)


def _publishers(publishers: Sequence[PublisherState]) -> str:
    """Each publisher: where it stands, what waits, and who holds it (or what the reader cannot see)."""
    rows = []
    for s in publishers:
        p, h = s.publisher, s.health
        where = f"{escape(p.table)} &rarr; {escape(p.topic)}"
        if h is None:
            rows.append(
                [escape(p.name), where, "-", "-", f"<span class='bad'>{escape(s.error or '')}</span>"]
            )
            continue
        if not h.judged:
            verdict = "<span class='muted'>not judged</span>"
        else:
            verdict = "<span class='ok'>healthy</span>" if h.ok else "<span class='bad'>STALE</span>"
        detail = [escape("; ".join(h.blockers))] if h.blockers else []
        if h.unseen:
            detail.append(f"<span class='bad'>{escape(h.unseen)}</span>")
        if h.judged and not h.ok:
            detail.append(escape(h.line()))
        rows.append(
            [
                escape(p.name),
                where,
                escape(h.position or "nothing published yet"),
                "-" if not h.judged else f"{h.held:,}",
                f"{verdict} " + "<br>".join(detail),
            ]
        )
    heads = ["<publisher", "<outbox &rarr; topic", "<position (xid/id)", "rows waiting", "<health"]
    return (
        "<h2 id='publishers'>Publishers</h2><p class='muted'>A committed row waits until every older "
        "transaction of the cluster has ended; the oldest open ones are named here.</p>"
        + _table("publishers", heads, rows)
    )


def _table(css: str, heads: list[str], rows: list[list[str]]) -> str:
    """Headers starting with '<' are left-aligned (text); the others are numbers, right-aligned."""
    left = [h.startswith("<") for h in heads]
    th = "".join(
        f"<th class='l'>{h[1:]}</th>" if lft else f"<th>{h}</th>" for h, lft in zip(heads, left, strict=True)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='l'>{c}</td>" if lft else f"<td>{c}</td>" for c, lft in zip(r, left, strict=True)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table class='{css}'><tr>{th}</tr>{body}</table>"


def _partitions(s: PipelineState) -> str:
    rows = []
    for p in s.partitions:
        age = s.lag_seconds.get((p.topic, p.partition))
        lag_time = "-" if age is None else _duration(age)
        rows.append(
            [
                f"{escape(p.topic)}[{p.partition}]",
                _n(p.position),
                _n(p.end),
                _n(p.lag),
                lag_time,
                _ago(p.last_commit),
            ]
        )
    heads = [
        "<partition",
        "stored position",
        "Kafka end offset",
        "lag (records)",
        "lag (time)",
        "<last commit",
    ]
    return "<h3>Partitions</h3>" + _table("partitions", heads, rows)


def _checks(s: PipelineState) -> str:
    if not s.checks:
        return "<h3>Invariants</h3><p class='muted'>Not verified yet (eosflow verify, or a DAG's verify).</p>"
    rows = []
    for c in s.checks:
        good = c["status"] in ("pass", "success", "skipped")
        status = f"<span class='{'ok' if good else 'bad'}'>{escape(c['status'])}</span>"
        failing = ""
        if c["rows"]:
            failing = f"<pre>{escape(chr(10).join(json.dumps(r, default=str) for r in c['rows']))}</pre>"
        detail = escape(c["message"] or "") + failing
        rows.append([escape(c["invariant"] or ""), escape(c["name"]), status, f"{c['failures']:,}", detail])
    heads = ["<invariant", "<check", "<status", "offending rows", "<detail"]
    return f"<h3>Invariants <span class='muted'>checked {_ago(s.checked_at)}</span></h3>" + _table(
        "checks", heads, rows
    )


def _plans(s: PipelineState) -> str:
    if not s.plans:
        return "<h3>Plans not committed</h3><p class='muted'>None: every plan committed.</p>"
    rows = [
        [
            escape(p["batch_id"]),
            escape(p["kind"]),
            "in flight" if p["in_flight"] else "fenced or abandoned",
            _ago(p["created_at"]),
        ]
        for p in s.plans
    ]
    return "<h3>Plans not committed</h3>" + _table("plans", ["<batch", "<kind", "<state", "<planned"], rows)


def _ranges(s: PipelineState, partition: int | None) -> str:
    name = s.pipeline.name
    links = [f"<a href='?{urlencode({'pipeline': name})}#{escape(name)}'>all</a>"] + [
        f"<a href='?{urlencode({'pipeline': name, 'partition': p})}#{escape(name)}'>{p}</a>"
        for p in sorted({p.partition for p in s.partitions})
    ]
    rows = [
        [
            f"{escape(r['topic'])}[{r['partition']}]",
            f"{r['start_offset']:,}",
            f"{r['end_offset']:,}",
            escape(r["kind"]),
            f"{r['records_read']:,}",
            f"{r['rows_written']:,}",
            f"{r['rows_rejected']:,}",
            escape(r["batch_id"]),
            _when(r["committed_at"]),
        ]
        for r in s.ranges
    ]
    heads = ["<partition", "start", "end", "<kind", "read", "written", "rejected", "<batch", "<committed"]
    shown = "all partitions" if partition is None else f"partition {partition}"
    return (
        f"<h3>Ledger: recent ranges <span class='muted'>({shown})</span></h3>"
        f"<nav>partition: {' '.join(links)}</nav>" + _table("ranges", heads, rows)
    )


def _chart(s: PipelineState) -> str:
    """Two small bar charts over the last 24 hours: records committed per hour and the largest lag planned."""
    hours = s.hourly
    if not hours:
        return ""
    records = [int(h["records"] or 0) for h in hours]
    lags = [int(h["lag"] or 0) for h in hours]
    return (
        "<h3>Last 24 hours</h3>"
        + _bars(records, "records committed per hour", "#2563eb")
        + _bars(lags, "largest lag a plan saw, per hour (records)", "#d97706")
    )


def _bars(values: list[int], title: str, colour: str, width: int = 480, height: int = 60) -> str:
    top = max(values) or 1
    step = width / len(values)
    bars = "".join(
        f"<rect x='{i * step + 1:.1f}' y='{height - v / top * height:.1f}' width='{step - 2:.1f}' "
        f"height='{v / top * height:.1f}' fill='{colour}'><title>{v:,}</title></rect>"
        for i, v in enumerate(values)
    )
    return (
        f"<div class='chart'><div class='muted'>{escape(title)} (max {max(values):,})</div>"
        f"<svg width='{width}' height='{height}' role='img' aria-label='{escape(title)}'>{bars}</svg>"
        f"<div class='axis' style='width:{width}px'><span>24 h ago</span><span>now</span></div></div>"
    )


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _when(t: datetime | None) -> str:
    return "-" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(t: datetime | None) -> str:
    if t is None:
        return "never"
    return f"{_duration((now() - t).total_seconds())} ago"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
