"""dbt's checks of one table: `run_dbt`, and its verdict (CheckResult, VerifyResult), which the warehouse
and Iceberg sinks return from Sink.verify and `eosflow verify` keeps (eosflow.verify, which asks the sink).

The project ships in the package (eosflow/dbt_project; `dbt/` in a checkout links to it).

`run_dbt` runs `dbt build` (staging views, marts, and the invariant tests I1-I6 of DESIGN.md) in the
calling process, through dbt's programmatic API (dbtRunner: dbt is imported once per process, about 3 s,
not once per verification), one invocation at a time, then reads `run_results.json` and, for each
failing test, the first offending rows dbt stored (`store_failures`: schema `analytics_failures`,
`analytics_failures_<pipeline>` for any pipeline but orders), which name the partition and the range
or offsets. dbt writes its target and logs under the state directory, one folder per pipeline, so a
read-only checkout works and two pipelines can be verified at once (one after the other in a process).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from eosflow.settings import Settings

if TYPE_CHECKING:
    from dbt_common.events.base_types import EventMsg

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
# dbt keeps its state per process (flags, adapters, its event manager) and reads the profile's variables
# from os.environ: its documentation supports invocations one after another in a process, never two at once.
_DBT_LOCK = threading.Lock()
_CONSOLE_LEVELS = frozenset({"info", "warn", "error"})  # what dbt's console shows at its default level
_NOT_ON_CONSOLE = frozenset({"CacheAction", "CacheDumpGraph"})  # dbt's console leaves these out too
_DBT_LOGGERS = ("stdout_log", "file_log")  # the Python loggers of dbt's console and of its dbt.log
_CANCEL_EVERY_S = 1.0  # past the deadline, how often dbt's open queries are cancelled again


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
    args = [
        "build",
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
        args += ["--select", *select]
    excluded = ([] if business_key else [I6_TEST]) + ([] if marts else ["tag:orders"])
    if excluded:
        args += ["--exclude", *excluded]
    env = {
        "EOSFLOW_PG_HOST": settings.pg_host,
        "EOSFLOW_PG_PORT": str(settings.pg_port),
        "EOSFLOW_PG_DATABASE": settings.pg_database,
        "EOSFLOW_PG_USER": settings.pg_user,
        "EOSFLOW_PG_PASSWORD": settings.pg_password,
        # dbt's profile (dbt/profiles.yml) takes sslmode; libpq reads the rest of the parameters
        # (sslrootcert, ...) from its own PG* variables, which dbt's connections read from os.environ.
        "EOSFLOW_PG_SSLMODE": dict(settings.pg_options).get("sslmode", "prefer"),
        **{_LIBPQ_ENV[k]: v for k, v in settings.pg_options if k in _LIBPQ_ENV},
        "DBT_LOG_PATH": str(log_dir),
        "DBT_TARGET_PATH": str(target_dir),
    }
    lines: list[str] = []
    with _DBT_LOCK, _environment(env), _Deadline(timeout_s) as deadline:
        returncode = _invoke(args, lines)
    if deadline.passed:
        raise TimeoutError(
            f"dbt build of pipeline {pipeline_name!r} ran past its {timeout_s:g} s and its queries were "
            f"cancelled: look in {log_dir / 'dbt.log'} for the query it was in (a lock held on the table?), "
            "or give it a longer timeout_s"
        )
    output = "".join(f"{line}\n" for line in lines)
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
    return VerifyResult(pipeline_name, returncode, checks, output, target_dir)


def _invoke(args: list[str], lines: list[str]) -> int:
    """One dbt invocation in this thread; dbt's exit code (0 success, 1 a model or test failed, 2 dbt
    failed); its console lines appended to `lines`, never to stdout."""
    with _dbt_loggers_restored():
        from dbt.cli.main import dbtRunner  # about 3 s on the first call of a process (and loads a .env)
        from dbt_common.events.event_manager_client import cleanup_event_logger
        from dbt_common.events.functions import env_scrubber
        from dbt_common.events.logger import PRINT_EVENT_NAMES

        def console(msg: EventMsg) -> None:  # the lines dbt's console logger would print, as it formats them
            info = msg.info
            if info.level not in _CONSOLE_LEVELS or info.name in _NOT_ON_CONSOLE:
                return
            text = env_scrubber(info.msg)  # type: ignore[attr-defined]  # every event has one (dbt's logger reads it)
            lines.append(text if info.name in PRINT_EVENT_NAMES else f"{datetime.now(UTC):%H:%M:%S}  {text}")

        cleanup_event_logger()  # dbt's import gave its events a console on sys.stdout: none may reach it
        # No console logger (the callback has its lines); dbt.log keeps its debug lines.
        quiet = ["--log-level", "none", "--log-level-file", "debug"]
        try:
            result = dbtRunner(callbacks=[console]).invoke([*args, *quiet])
        finally:
            cleanup_event_logger()  # its loggers and our callback
    if result.exception is not None and not isinstance(result.exception, Exception):
        # Ctrl-C, Airflow's task timeout or termination, pytest's timeout: BaseExceptions dbt caught on
        # their way through it; they stop the caller, as they did when dbt was a child process.
        raise result.exception
    if result.exception is not None:
        error = env_scrubber(str(result.exception))
        if error not in "\n".join(lines):  # dbt's own errors are logged as events, a usage error is not
            lines.append(error)
        return 2
    return 0 if result.success else 1


@contextmanager
def _dbt_loggers_restored() -> Iterator[None]:
    """dbt's two Python loggers (propagate=False: never the root's handlers) end with the handlers they had
    before: dbt replaces them with its own at each invocation (its console on sys.stdout, dbt.log), and
    pytest attaches its capture to every logger that does not propagate. dbt.log is closed after."""
    known = logging.Logger.manager.loggerDict
    kept = {name: list(getattr(known.get(name), "handlers", [])) for name in _DBT_LOGGERS}
    try:
        yield
    finally:
        for name, handlers in kept.items():
            logger = logging.getLogger(name)
            for handler in [h for h in logger.handlers if h not in handlers]:
                logger.removeHandler(handler)
                if isinstance(handler, logging.FileHandler):
                    handler.close()  # never the console's: it is sys.stdout
            for handler in [h for h in handlers if h not in logger.handlers]:
                logger.addHandler(handler)


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """os.environ with `env` for dbt's invocation (its profile and libpq read them there; dbt's import and
    each invocation also load a .env), then exactly as it was; and the working directory as it was."""
    saved, cwd = dict(os.environ), os.getcwd()
    os.environ.update(env)
    try:
        yield
    finally:
        for key in [k for k in os.environ if k not in saved]:
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        if os.getcwd() != cwd:
            os.chdir(cwd)


class _Deadline:
    """What replaces the subprocess's kill at timeout_s: dbt runs in this thread, which nothing can kill, so
    past the deadline a watchdog thread cancels dbt's open queries with dbt's own cancellation (its Ctrl-C's:
    pg_terminate_backend of each connection), again every second until the invocation returns, and run_dbt
    raises TimeoutError instead of returning a verdict. A hang outside a query (none is known) is not cut."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.passed = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dbt-deadline", daemon=True)

    def __enter__(self) -> _Deadline:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        if self._done.wait(self.timeout_s):
            return
        self.passed = True
        while True:
            _cancel_dbt_queries()
            if self._done.wait(_CANCEL_EVERY_S):
                return


def _cancel_dbt_queries() -> None:
    from dbt.adapters.base import BaseAdapter
    from dbt.adapters.factory import FACTORY

    for adapter in list(FACTORY.adapters.values()):
        if not isinstance(adapter, BaseAdapter):
            continue
        try:
            with adapter.connection_named("eosflow_deadline"):
                adapter.cancel_open_connections()
        except Exception:  # noqa: BLE001 - the invocation may be ending (its adapters reset): nothing to cancel
            continue


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
