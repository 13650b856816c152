"""dbt's checks of one table: `run_dbt`, and its verdict (CheckResult, VerifyResult), which the warehouse
and Iceberg sinks return from Sink.verify and `eosflow verify` keeps (eosflow.verify, which asks the sink).

The project ships in the package (eosflow/dbt_project; `dbt/` in a checkout links to it).

`run_dbt` runs `dbt build` (staging views, marts, and the invariant tests I1-I6 of DESIGN.md) in a
process of its own, then reads `run_results.json` and, for each failing test, the first offending
rows dbt stored (`store_failures`: schema `analytics_failures`, `analytics_failures_<pipeline>` for
any pipeline but orders), which name the partition and the range or offsets. dbt writes its target
and logs under the state directory, one folder per pipeline, so a read-only checkout works and two
pipelines can be verified at once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from eosflow.settings import Settings

# The dbt project ships inside the package (the checkout's dbt/ is a link to it): an installed eosflow
# verifies without a checkout.
DBT_PROJECT = Path(__file__).resolve().with_name("dbt_project")
ROWS_SHOWN = 5  # offending rows read back per failing test
PASSING = ("pass", "success", "warn", "not checked")  # statuses that do not fail a verification (warn:
# shown but not failing: an Iceberg table's file names, sinks/iceberg/verify.py; not checked:
# I6 of a pipeline that declares no business key)
I6_TEST = "no_duplicate_business_keys"
# libpq's environment variables for the connection parameters a warehouse may need beyond the profile's.
_LIBPQ_ENV = {
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslcrl": "PGSSLCRL",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
    "options": "PGOPTIONS",
}
# The marts (tag `orders`) read these columns: they are built for pipelines that declare them all.
MART_COLUMNS = frozenset(
    {"event_id", "event_type", "event_time", "order_id", "customer_id", "amount_cents", "currency"}
)


@dataclass(frozen=True)
class CheckResult:
    """One dbt test (or a model that did not build)."""

    name: str  # the test's name in dbt: unique_kafka_coordinates, not_null_order_events_event_id, ...
    invariant: str | None  # "I1".."I6" (the test's meta), None for other tests and for models
    status: str  # tests: pass | fail | error | skipped; models: success | error | skipped
    failures: int  # offending rows (0 unless status is fail)
    rows: tuple[dict[str, Any], ...] = ()  # the first offending rows, column -> value
    message: str | None = None  # dbt's message (errors, skips)
    resource_type: str = "test"

    @property
    def ok(self) -> bool:
        return self.status in PASSING

    def describe(self) -> str:
        label = f"{self.invariant} {self.name}" if self.invariant else self.name
        if self.status in ("pass", "success"):
            return f"{label:<42} ok"
        if self.status == "fail":
            head = f"{label:<42} FAILED: {self.failures} offending row{'s' * (self.failures != 1)}"
            more = self.failures - len(self.rows)
            lines = [head, *(f"    {_render(r)}" for r in self.rows)]
            return "\n".join(lines + ([f"    ... and {more} more"] if more > 0 else []))
        reason = self.message or ("an upstream node failed" if self.status == "skipped" else "")
        return f"{label:<42} {self.status.upper()}: {reason.strip()}".replace("\n", "\n    ")


@dataclass(frozen=True)
class VerifyResult:
    pipeline: str
    returncode: int  # dbt's: 0 all good, 1 a test failed or a model errored, 2 dbt itself failed
    checks: tuple[CheckResult, ...]  # every test, then the models that did not build
    output: str  # dbt's console output, for the log
    target_dir: Path  # run_results.json, manifest.json and compiled SQL of this run

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.ok]

    def check(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no dbt test or model {name!r} in this run")

    def check_rows(self) -> list[tuple[str, str | None, str, int, str, str | None]]:
        return [
            (c.name, c.invariant, c.status, c.failures, json.dumps(list(c.rows), default=str), c.message)
            for c in self.checks
        ]

    def table(self) -> str:
        """One line per invariant (ok, or FAILED with the offending partitions and offsets)."""
        invariants = sorted((c for c in self.checks if c.invariant), key=lambda c: c.invariant or "")
        others = [c for c in self.checks if not c.invariant]
        verdict = "ok" if self.ok else "FAILED"
        lines = [f"dbt verify of pipeline {self.pipeline}: {verdict}"]
        lines += [f"  {c.describe()}" for c in invariants]
        shown = [c for c in others if not c.ok or c.status == "warn"]  # a warning passes, and is shown
        lines += [f"  {c.describe()}" for c in shown]
        passed = len(others) - len(shown)
        if passed:
            lines.append(f"  {'other tests':<42} {passed} ok")
        if not self.checks:
            lines.append(f"  dbt did not run (exit code {self.returncode}):")
            lines += [f"    {line}" for line in self.output.strip().splitlines()[-15:]]
        return "\n".join(lines)


def dbt_dirs(settings: Settings, pipeline_name: str, purpose: str = "verify") -> tuple[Path, Path]:
    """(target, logs) of one pipeline's dbt runs, under the state directory. The marts build has its own:
    it runs in its own DAG, possibly while the next ingest verifies, and dbt's run_results.json and partial
    parse state would otherwise be one file for both."""
    base = settings.state_dir / "dbt" / pipeline_name
    if purpose != "verify":
        base = base / purpose
    return base / "target", base / "logs"


def run_dbt(
    settings: Settings,
    pipeline_name: str,
    output_table: str,
    select: Sequence[str] | None = None,
    timeout_s: float = 600,
    business_key: str | None = "event_id",
    marts: bool = True,
    purpose: str = "verify",
    state: Mapping[str, object] | None = None,
) -> VerifyResult:
    """`dbt build` of the project for one pipeline; `output_table` is `schema.table` (or `table` in raw).

    business_key: the column I6 checks (None: I6 is left out and reported as not checked); marts:
    whether the orders marts apply (the pipeline declares their columns). The defaults are the
    orders declaration's. state: a change stream's state table, for S1-S3 (state_table, state_schema,
    primary_key, image_columns, soft_deletes: dbt vars).
    """
    schema, _, table = output_table.rpartition(".")
    schema = schema or "raw"
    target_dir, log_dir = dbt_dirs(settings, pipeline_name, purpose)
    target_dir.mkdir(parents=True, exist_ok=True)
    results_path = target_dir / "run_results.json"
    results_path.unlink(missing_ok=True)  # never read a previous run's results
    project = DBT_PROJECT
    cmd = [
        _dbt_executable(), "build",
        "--project-dir", str(project), "--profiles-dir", str(project),
        "--target-path", str(target_dir), "--log-path", str(log_dir),
        "--vars", json.dumps({
            "pipeline": pipeline_name, "output_table": table, "output_schema": schema,
            "business_key": business_key or "",
            **(state or {}),
        }),
        "--no-use-colors",
    ]  # fmt: skip
    if select:
        cmd += ["--select", *select]
    excluded = ([] if business_key else [I6_TEST]) + ([] if marts else ["tag:orders"])
    if excluded:
        cmd += ["--exclude", *excluded]
    env = dict(
        os.environ,
        EOSFLOW_PG_HOST=settings.pg_host,
        EOSFLOW_PG_PORT=str(settings.pg_port),
        EOSFLOW_PG_DATABASE=settings.pg_database,
        EOSFLOW_PG_USER=settings.pg_user,
        EOSFLOW_PG_PASSWORD=settings.pg_password,
        # dbt's profile (dbt/profiles.yml) takes sslmode; libpq reads the rest of the parameters
        # (sslrootcert, ...) from its own PG* variables, which dbt's connection inherits.
        EOSFLOW_PG_SSLMODE=dict(settings.pg_options).get("sslmode", "prefer"),
        **{_LIBPQ_ENV[k]: v for k, v in settings.pg_options if k in _LIBPQ_ENV},
        DBT_LOG_PATH=str(log_dir),
        DBT_TARGET_PATH=str(target_dir),
    )
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    output = done.stdout + done.stderr
    checks = _read_results(settings, target_dir) if results_path.exists() else ()
    if not business_key:
        checks = (
            CheckResult(
                I6_TEST,
                "I6",
                "not checked",
                0,
                message=f"pipeline {pipeline_name!r} declares no business_key",
            ),
            *checks,
        )
    return VerifyResult(pipeline_name, done.returncode, checks, output, target_dir)


def _dbt_executable() -> str:
    beside = Path(sys.executable).parent / "dbt"  # the dbt of this interpreter's environment
    return str(beside) if beside.exists() else shutil.which("dbt") or "dbt"


def _read_results(settings: Settings, target_dir: Path) -> tuple[CheckResult, ...]:
    results = json.loads((target_dir / "run_results.json").read_text())["results"]
    nodes = json.loads((target_dir / "manifest.json").read_text())["nodes"]
    failing = [r for r in results if r["status"] == "fail" and r.get("relation_name")]
    stored: dict[str, tuple[dict[str, Any], ...]] = {}
    if failing:  # read back the offending rows dbt stored (store_failures)
        with psycopg.connect(settings.warehouse_dsn, row_factory=dict_row) as conn:
            for r in failing:
                query = sql.SQL("select * from {} limit {}").format(
                    sql.SQL(r["relation_name"]), sql.Literal(ROWS_SHOWN)
                )
                stored[r["unique_id"]] = tuple(conn.execute(query).fetchall())
    tests: list[CheckResult] = []
    models: list[CheckResult] = []
    for r in results:
        node = nodes.get(r["unique_id"], {})
        result = CheckResult(
            name=node.get("name", r["unique_id"]),
            invariant=node.get("config", {}).get("meta", {}).get("invariant"),
            status=r["status"],
            failures=int(r.get("failures") or 0) if r["status"] == "fail" else 0,
            rows=stored.get(r["unique_id"], ()),
            message=r.get("message"),
            resource_type=node.get("resource_type", r["unique_id"].split(".", 1)[0]),
        )
        if result.resource_type == "test":
            tests.append(result)
        elif not result.ok:
            models.append(result)
    return tuple(sorted(tests, key=lambda c: (c.invariant or "~", c.name)) + models)


def _render(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in row.items())
