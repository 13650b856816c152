"""The change-stream bench (issue 44): one Debezium topic, replicated three ways, each checked.

`eosflow bench --changes N --keys K` loads N changes of a customers table (eosflow_dev.bench.change_load) and
runs, each in a process of its own and one after the other on that topic:

- `eosflow-changes`: `eosflow ingest` of a `changes: debezium` pipeline (primary_key [id]): the changelog
  as its target, the state table recomputed in the commit;
- `merge-loop`: the merge loop a competent engineer writes (eosflow_dev.bench.merge_loop);
- `eosflow-append`: `eosflow ingest` of the same columns read from `after` as a plain JSON pipeline: no
  state, every record appended (the tombstones rejected as null values).

Afterwards eosflow's state table and the merge loop's replica must hold exactly the rows the generator
says the source holds (equal digests), and each eosflow run's output must hold every record of the topic.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from eosflow import names
from eosflow_dev.bench import change_load, eosflow_run
from eosflow_dev.bench.measure import Measured, MeasurementFailed, run_measured, worker_result
from eosflow_dev.bench.results import CHANGE_MEASUREMENTS, Result
from eosflow_dev.stack.settings import StackSettings

Log = Callable[[str], None]
SCHEMA = "bench"
SHORT = {"eosflow-changes": "eosflow changes", "merge-loop": "merge loop", "eosflow-append": "eosflow append"}
APPLY = "of which the state apply"  # a step inside the commit, timed by eosflow.sinks.postgres.commit
STATE_APPLY = re.compile(r"; of it state apply (?P<seconds>[0-9.]+)s")  # on the summary's time line

COLUMNS = change_load.DECLARED_COLUMNS
# The same columns appended from `after` as they are on the wire: a plain JSON pipeline has no Debezium
# forms (a numeric as its string, an instant as microseconds, jsonb as its text), and a delete's `after`
# is null, so none is required.
APPEND_COLUMNS = [
    {"name": "id", "type": "bigint", "source": "$.after.id"},
    {"name": "email", "type": "text", "source": "$.after.email"},
    {"name": "balance", "type": "text", "source": "$.after.balance"},
    {"name": "updated_at", "type": "bigint", "source": "$.after.updated_at"},
    {"name": "profile", "type": "text", "source": "$.after.profile"},
]


@dataclass(frozen=True)
class ChangeCell:
    run_id: str
    partitions: int
    changes: int
    keys: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.run_id}_p{self.partitions}_c{self.changes}"

    @property
    def topic(self) -> str:
        return f"bench.{self.name}"

    def table(self, kind: str) -> str:
        return f"{SCHEMA}.{kind}_{self.name}"


@dataclass
class ChangeOutcome:
    workload: change_load.ChangeWorkload | None = None
    results: list[Result] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    expected_digest: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Context:
    settings: StackSettings
    cell: ChangeCell
    workload: change_load.ChangeWorkload
    work_dir: Path
    log: Log

    def result(self, measurement: str, measured: Measured, seconds: float, timed: str, detail) -> Result:
        return Result(
            run_id=self.cell.run_id,
            measurement=measurement,
            partitions=self.cell.partitions,
            loaded=self.workload.records,
            records=self.workload.records,
            payload_bytes=self.workload.payload_bytes,
            seconds=seconds,
            wall_s=measured.wall_s,
            peak_rss_mib=measured.rss.total_mb,
            peak_jvm_rss_mib=measured.rss.jvm_mb,
            timed=timed,
            detail=detail,
        )

    def log_path(self, measurement: str) -> Path:
        return self.work_dir / "logs" / f"{self.cell.name}.{measurement}.log"


def declaration(columns: list[dict], **extra) -> dict:
    return {"format": "json", "columns": columns, **extra}


def _eosflow(ctx: _Context, measurement: str, spec: dict, target: str, sink: dict) -> tuple[Result, str]:
    """`eosflow ingest` of a fresh pipeline over the whole topic; returns the result and its output's text."""
    pipeline = names.fitted(f"bench_{measurement.replace('-', '_')}_{ctx.cell.name}")
    records = ctx.workload.records
    config = eosflow_run.write_pipelines_file(
        ctx.work_dir / f"{pipeline}.pipelines.yml", pipeline, ctx.workload.topic, target, records,
        sink=sink, declaration=spec,
    )  # fmt: skip
    measured = run_measured(
        f"{measurement} ({records:,} records)",
        eosflow_run.ingest_cmd(pipeline),
        ctx.log_path(measurement),
        ctx.log,
        env=eosflow_run.ingest_env(config),
    )
    summary = eosflow_run.parse_summary(measured.stdout)
    if summary.outcome not in eosflow_run.OUTCOME_OK:
        raise MeasurementFailed(f"eosflow ingest ended {summary.outcome}; see {measured.log_path}")
    detail = dict(summary.phases)
    detail["outside phases"] = max(measured.wall_s - sum(summary.phases.values()), 0.0)
    detail["written"], detail["rejected"] = float(summary.written), float(summary.rejected)
    timed = (
        "the `eosflow ingest` process, start to exit (plan to commit; Spark's start too when the plan is "
        "past EOSFLOW_INLINE_MAX_OFFSETS)"
    )
    # The summary (its time line: the state apply inside the commit) is on stdout; the run's log beside it.
    logged = ctx.log_path(measurement).read_text(errors="replace")
    return ctx.result(measurement, measured, measured.wall_s, timed, detail), measured.stdout + "\n" + logged


def _eosflow_changes(ctx: _Context) -> Result:
    spec = declaration(COLUMNS, changes="debezium", primary_key=["id"])
    sink = {"target_table": ctx.cell.table("log"), "state_table": ctx.cell.table("state")}
    result, text = _eosflow(ctx, "eosflow-changes", spec, ctx.cell.table("log"), sink)
    applies = [float(m["seconds"]) for m in STATE_APPLY.finditer(text)]
    if applies:  # inside the commit: shown right after it
        detail = {}
        for name, seconds in result.detail.items():
            detail[name] = seconds
            if name == "commit":
                detail[APPLY] = sum(applies)
        result.detail = detail if APPLY in detail else {**detail, APPLY: sum(applies)}
    return result


def _eosflow_append(ctx: _Context) -> Result:
    spec = declaration(APPEND_COLUMNS)
    result, _ = _eosflow(ctx, "eosflow-append", spec, ctx.cell.table("append"), {})
    return result


def _merge_loop(ctx: _Context) -> Result:
    cmd = [sys.executable, "-m", "eosflow_dev.bench.merge_loop", "--topic", ctx.workload.topic, "--table"]
    cmd += [ctx.cell.table("merge"), "--partitions", str(ctx.cell.partitions)]
    measured = run_measured("merge loop", cmd, ctx.log_path("merge-loop"), ctx.log)
    stats = worker_result(measured, "merge loop")
    if int(stats["rows"]) != ctx.workload.records:
        raise MeasurementFailed(f"the merge loop read {stats['rows']:,} of {ctx.workload.records:,} records")
    return ctx.result("merge-loop", measured, measured.wall_s, "its process, start to exit", stats)


RUNNERS: dict[str, Callable[[_Context], Result]] = {
    "eosflow-changes": _eosflow_changes,
    "merge-loop": _merge_loop,
    "eosflow-append": _eosflow_append,
}
assert tuple(RUNNERS) == tuple(CHANGE_MEASUREMENTS)
# The table each measurement's rows are checked in, and whether it is a state (a digest) or an append log.
STATE_TABLES = {"eosflow-changes": "state", "merge-loop": "merge"}


def run_changes(
    settings: StackSettings,
    cell: ChangeCell,
    only: Sequence[str],
    work_dir: Path,
    log: Log,
    keep: bool = False,
) -> ChangeOutcome:
    """Load the cell's topic, run each selected measurement on it, check every table written."""
    outcome = ChangeOutcome()
    work_dir.mkdir(parents=True, exist_ok=True)
    log(
        f"loading {cell.changes:,} changes over {cell.keys:,} keys into {cell.topic} "
        f"({cell.partitions} partitions)"
    )
    workload = change_load.load_changes(
        settings, cell.topic, cell.partitions, cell.changes, cell.keys, cell.seed, log
    )
    outcome.workload = workload
    log(
        f"loaded {workload.records:,} records ({workload.ops}, and a tombstone per delete; "
        f"{workload.payload_mb:,.1f} MB) in {workload.load_s:.1f} s; the source ends with "
        f"{len(workload.final):,} rows"
    )
    ctx = _Context(settings, cell, workload, work_dir, log)
    selected = [m for m in CHANGE_MEASUREMENTS if m in only]
    tables = [cell.table(k) for k in ("expected", "log", "state", "merge", "append")]
    tables.append(f"{cell.table('merge')}_positions")  # the merge loop's, beside its replica
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        conn.execute(f"create schema if not exists {SCHEMA}")
        for table in tables:
            conn.execute(f"drop table if exists {table}")
        change_load.write_expected(conn, cell.table("expected"), workload.final)
        rows, outcome.expected_digest = change_load.digest(conn, cell.table("expected"))
        if rows != len(workload.final):
            outcome.problems.append(f"the expected table holds {rows:,} rows, not {len(workload.final):,}")
        for i, measurement in enumerate(selected, 1):
            log(f"[{i}/{len(selected)}] {CHANGE_MEASUREMENTS[measurement]}: running")
            started = time.monotonic()
            try:
                result = RUNNERS[measurement](ctx)
            except Exception as exc:  # noqa: BLE001 - one failure must not cost the other measurements
                outcome.problems.append(f"{measurement}: {exc}")
                log(f"[{i}/{len(selected)}] {measurement} FAILED: {exc}")
                continue
            _check(conn, ctx, result, outcome)
            outcome.results.append(result)
            log(
                f"[{i}/{len(selected)}] {measurement}: {result.records:,} records in {result.seconds:.2f} s "
                f"({result.records_per_s:,.0f} records/s, peak RSS {result.peak_rss_mib:,.0f} MiB; "
                f"{time.monotonic() - started:.0f} s in all)"
            )
        if not keep:
            for table in tables:
                conn.execute(f"drop table if exists {table}")
            conn.execute(
                "delete from eosflow.rejected where pipeline = any(%s)",
                ([names.fitted(f"bench_{m.replace('-', '_')}_{cell.name}") for m in selected],),
            )
    if not keep:
        from eosflow_dev.bench.suite import _delete_topics

        _delete_topics(settings.bootstrap_servers, [cell.topic], log)
    return outcome


def _check(conn: psycopg.Connection, ctx: _Context, result: Result, outcome: ChangeOutcome) -> None:
    """A state table must equal the source's end (the generator's rows); an eosflow run must have taken every
    record of the topic (written or, for the append's tombstones, rejected)."""
    m, work = result.measurement, ctx.workload
    if m in STATE_TABLES:
        rows, found = change_load.digest(conn, ctx.cell.table(STATE_TABLES[m]))
        result.rows_checked, result.fingerprint = rows, found
        if found != outcome.expected_digest or rows != len(work.final):
            outcome.problems.append(
                f"{m}: its state table holds {rows:,} rows (digest {found}), the source {len(work.final):,} "
                f"(digest {outcome.expected_digest})"
            )
    if m.startswith("eosflow"):
        written, rejected = int(result.detail["written"]), int(result.detail["rejected"])
        tombstones = work.ops.get("d", 0)
        expected_rejected = tombstones if m == "eosflow-append" else 0
        if written + rejected != work.records or rejected != expected_rejected:
            outcome.problems.append(
                f"{m}: wrote {written:,} and rejected {rejected:,} of {work.records:,} records "
                f"(expected {expected_rejected:,} rejected)"
            )
        if m == "eosflow-append":
            result.rows_checked = written


# -- the report ------------------------------------------------------------------------------------------
def ratio(result: Result, results: list[Result]) -> float | None:
    """eosflow-changes' records/s over this measurement's; > 1: eosflow's change stream is faster."""
    eos = next((r for r in results if r.measurement == "eosflow-changes"), None)
    if eos is None or result is eos or not result.records_per_s:
        return None
    return eos.records_per_s / result.records_per_s


def markdown(outcome: ChangeOutcome, header: str) -> str:
    work, results = outcome.workload, outcome.results
    assert work is not None
    ops = work.ops
    lines = [
        header,
        "",
        f"{work.changes:,} changes of a customers table over {work.keys:,} keys, as Debezium's JsonConverter "
        f"writes them without the schema block: {ops.get('c', 0):,} creates ({work.keys:,} first inserts, "
        f"the rest re-inserts of deleted keys), {ops.get('u', 0):,} updates, {ops.get('d', 0):,} deletes "
        f"each followed by its tombstone: {work.records:,} Kafka records ({work.payload_mb:,.1f} MB of "
        f"key + value) in {work.partitions} partitions, keyed by id. The source ends with "
        f"{len(work.final):,} rows.",
        "",
        "| measurement | records | seconds | records/s | MB/s | peak RSS MiB (JVM) "
        "| eosflow changes ÷ this |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        value = ratio(r, results)
        lines.append(
            f"| {r.label} | {r.records:,} | {r.seconds:,.2f} | {r.records_per_s:,.0f} "
            f"| {r.mb_per_s:,.2f} | {r.peak_rss_mib:,.0f} ({r.peak_jvm_rss_mib:,.0f}) "
            f"| {'' if value is None else f'{value:.2f}'} |"
        )
    by = {r.measurement: r for r in results}
    if "eosflow-changes" in by and "merge-loop" in by:
        value = ratio(by["merge-loop"], results) or 0.0
        verdict = "met" if value >= 1.0 else "MISSED"
        lines += [
            "",
            f"Issue 44's target, eosflow changes ≥ 1.0 × the merge loop: **{value:.2f} ×**, {verdict}.",
        ]
    for m in ("eosflow-changes", "eosflow-append"):
        if m in by:
            lines += ["", f"## Where the time goes: {SHORT[m]}", "", *_steps(by[m])]
    if "merge-loop" in by:
        d = by["merge-loop"].detail
        lines += [
            "",
            "## The merge loop",
            "",
            f"{int(d.get('batches', 0)):,} transactions; COPY of the changes into its temporary table "
            f"{d.get('copy_s', 0):,.2f} s (the decode and COPY of each batch), the reduce, delete, upsert "
            f"and positions {d.get('merge_s', 0):,.2f} s; its process {by['merge-loop'].seconds:,.2f} s.",
        ]
    lines += ["", "## Checks", ""]
    if outcome.problems:
        lines += [f"- PROBLEM: {p}" for p in outcome.problems]
    else:
        states = [SHORT[r.measurement] for r in results if r.measurement in STATE_TABLES]
        if states:
            lines.append(
                f"- The state tables of {' and '.join(states)} hold exactly the source's {len(work.final):,} "
                f"rows (digest {outcome.expected_digest}, the generator's)."
            )
        for r in results:
            if r.measurement.startswith("eosflow"):
                lines.append(
                    f"- {SHORT[r.measurement]}: every one of the {work.records:,} records taken "
                    f"({int(r.detail['written']):,} written, {int(r.detail['rejected']):,} rejected)."
                )
    return "\n".join(lines) + "\n"


def _steps(r: Result) -> list[str]:
    lines = ["| step | seconds | share |", "|---|---:|---:|"]
    for name, seconds in r.detail.items():
        if name in ("written", "rejected"):
            continue
        if name == APPLY:  # inside the commit, already counted in it
            lines.append(f"| {name} (inside the commit) | {seconds:,.2f} | ({seconds / r.seconds:.0%}) |")
            continue
        outside = name == "outside phases"
        label = "outside the job's steps (interpreter, imports, migrations)" if outside else name
        lines.append(f"| {label} | {seconds:,.2f} | {seconds / r.seconds:.0%} |")
    lines.append(f"| total (process) | {r.seconds:,.2f} | 100% |")
    return lines


def write_report(out_dir: Path, outcome: ChangeOutcome, header: str) -> list[Path]:
    """changes.md, changes.csv and changes.png in `out_dir`."""
    import csv

    from eosflow_dev.bench.results import CSV_FIELDS

    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "changes.md"
    md.write_text(markdown(outcome, header))
    path_csv = out_dir / "changes.csv"
    with path_csv.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        out.writeheader()
        for r in outcome.results:
            out.writerow(r.as_row(ratio(r, outcome.results)))
    paths = [md, path_csv]
    if outcome.results:
        paths.append(_chart(out_dir / "changes.png", outcome.results))
    return paths


def _chart(path: Path, results: list[Result]) -> Path:
    from eosflow_dev.bench.report import _pyplot, _thousands

    plt = _pyplot()
    eos = next((r for r in results if r.measurement == "eosflow-changes"), None)
    fig, axes = plt.subplots(1, 2 if eos else 1, figsize=(13 if eos else 8, 4.2), squeeze=False)
    ax = axes[0][0]
    shown = results[::-1]
    ax.barh(
        [SHORT[r.measurement] for r in shown],
        [r.records_per_s for r in shown],
        color=["#c44e52" if r.measurement == "eosflow-changes" else "#4c72b0" for r in shown],
    )
    for y, r in enumerate(shown):
        value = ratio(r, results)
        note = f"  (eosflow changes ÷ this {value:.2f})" if value is not None else ""
        ax.text(r.records_per_s, y, f" {r.records_per_s:,.0f}{note}", va="center", fontsize=8)
    ax.xaxis.set_major_formatter(_thousands())
    ax.set_xlabel("Kafka records/s (higher is better)")
    ax.set_title(f"{results[0].records:,} records of changes, {results[0].partitions} partitions")
    ax.margins(x=0.5)
    if eos is not None:
        ax2 = axes[0][1]
        left = commit_at = 0.0
        for name, seconds in eos.detail.items():
            if name in ("written", "rejected", APPLY):
                continue
            commit_at = left if name == "commit" else commit_at
            ax2.barh(["eosflow changes"], [seconds], left=left, label=f"{name} {seconds:.1f}s")
            left += seconds
        if APPLY in eos.detail:  # under the commit it is part of
            ax2.barh(["of the commit"], [eos.detail[APPLY]], left=commit_at, color="#8c8c8c",
                     label=f"state apply {eos.detail[APPLY]:.1f}s")  # fmt: skip
        ax2.set_xlabel("seconds")
        ax2.set_title("eosflow changes, step by step")
        ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
