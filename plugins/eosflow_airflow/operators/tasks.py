"""The Python tasks of the eosflow DAGs. Each logs a short summary and fails with one clear line."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from airflow.sdk import get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from eosflow_airflow.hooks.eosflow import EosflowHook

log = logging.getLogger(__name__)


def ingest_dag_id(pipeline_name: str) -> str:
    return f"eosflow_ingest_{pipeline_name}"


def marts_dag_id(pipeline_name: str) -> str:
    return f"eosflow_marts_{pipeline_name}"


def backfill_dag_id(pipeline_name: str) -> str:
    """One per pipeline: who may trigger it may replay that pipeline and no other (per-DAG rights)."""
    return f"eosflow_backfill_{pipeline_name}"


def acknowledge_hint(pipeline_name: str) -> str:
    """How to accept a data loss from Airflow: a manual run whose plan records the gap."""
    return (
        f"To accept the loss, trigger {ingest_dag_id(pipeline_name)} with acknowledge_data_loss=true "
        '(Trigger, then tick the param; or conf {"acknowledge_data_loss": true}): that run records the '
        "gap in the ledger as a 'lost' range and continues from the log start. Scheduled runs never do."
    )


def _refusals() -> tuple[type[Exception], ...]:
    """Configuration errors a retry cannot fix: they fail the task at once, with their message."""
    from eosflow.ledger.planner import PositionBeyondLogError, TopicRecreatedError
    from eosflow.pipelines import PipelineConfigError
    from eosflow.sources.kafka.offsets import TopicMissingError

    return PipelineConfigError, TopicMissingError, PositionBeyondLogError, TopicRecreatedError


@task(task_id="plan")
def plan(pipeline_name: str) -> dict:
    """Step 1: persist this run's plan before Spark starts; a retried run finds and reuses it.

    The Spark task re-reads this persisted plan, so an acknowledged loss reaches the commit through it.
    """
    from eosflow.ledger.planner import DataLossError
    from eosflow.runners import job

    settings = EosflowHook().settings()
    context = get_current_context()
    acknowledge = bool(context["params"].get("acknowledge_data_loss", False))
    # Before planning (a Kafka sink's plan step may mirror a commit); `announce` counts what comes after.
    context["ti"].xcom_push(key="ledger_mark", value=_ledger_mark(settings))
    try:
        planned, status = job.prepare(
            settings, pipeline_name, context["run_id"], log=log.info, acknowledge_data_loss=acknowledge
        )
    except DataLossError as exc:
        listed = "; ".join(f"{r} ({r.span:,} offsets)" for r in exc.missing)
        raise AirflowFailException(
            f"DATA LOSS in pipeline {pipeline_name!r}: Kafka deleted records before they were read: "
            f"{listed}. They cannot be recovered from Kafka. {acknowledge_hint(pipeline_name)}"
        ) from None
    except _refusals() as exc:
        raise AirflowFailException(str(exc)) from None
    lost = [p.lost for p in planned.partitions if p.lost is not None]
    if lost:
        log.warning("data loss acknowledged, recorded as 'lost' at commit: %s", "; ".join(map(str, lost)))
    lines = [f"{'partition':<24}{'start':>12}{'end':>12}{'offsets':>12}{'lag after':>12}"]
    for part in planned.partitions:
        r = part.range
        lines.append(
            f"{f'{r.topic}[{r.partition}]':<24}{r.start:>12,}{r.end:>12,}{r.span:>12,}{part.lag_after:>12,}"
            + ("  (first range)" if part.first_seen else "")
            + (f"  (lost before: {part.lost})" if part.lost is not None else "")
        )
    state = f"reused ({status})" if status else "new"
    log.info(
        "plan %s for batch %s, %d partition(s) with new records:\n%s",
        state,
        planned.batch_id,
        len(planned.nonempty),
        "\n".join(lines),
    )
    return {"batch_id": planned.batch_id, "offsets": sum(r.span for r in planned.ranges)}


def _ledger_mark(settings) -> int:
    """The ledger's newest row before this run commits: `announce` counts what comes after it."""
    import psycopg

    from eosflow.ledger import store
    from eosflow.ledger.migrate import migrate

    migrate(settings.warehouse_dsn, log=log.info)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        return store.ledger_mark(conn)


@task(task_id="discover")
def discover(entry: str) -> list[str]:
    """A database entry's first step: its table topics found, each table's columns read from Debezium's
    schema block, the members recorded; returns the members, one map index each in the tasks after (a
    table added later is a new index, not a new DAG)."""
    from eosflow.runners import database

    settings = EosflowHook().settings()
    declared = database.database_entry(settings, entry)
    if declared is None:
        raise AirflowFailException(f"{entry!r} is no longer a database entry of the pipelines file")
    _, members = database.discover_members(settings, declared, log.info)
    if not members:
        raise AirflowSkipException(
            f"no table topic {declared.topic_prefix}.<schema>.<table> with change records yet: nothing to run"
        )
    return members


@task(task_id="job_args")
def member_job_args(member: str) -> list[str]:
    """A member's spark-submit arguments: its name and this DAG run's id (a retry reuses the plan)."""
    return ["--pipeline", member, "--run-id", get_current_context()["run_id"]]


@task(task_id="announce")
def announce(pipeline_name: str, upstream: str = "plan") -> dict:
    """The output asset's event, only when this run committed rows: empty runs, and plans a cleared run
    finds already committed, are skipped and emit nothing. Its extra says what was committed.

    The ingest and backfill DAGs of a pipeline both list the pipeline's asset as this task's outlet.
    """
    import psycopg

    from eosflow import pipelines
    from eosflow.ledger import store
    from eosflow_airflow.lineage import output_asset

    context = get_current_context()
    settings = EosflowHook().settings()
    pipeline = pipelines.load(settings, pipeline_name)
    asset = output_asset(pipeline)
    mark = context["ti"].xcom_pull(task_ids=upstream, key="ledger_mark")  # pushed by plan or validate
    if mark is None:  # planned by an eosflow without marks (a run in flight through an upgrade)
        log.warning("no ledger mark from %s: counting every row this run committed", upstream)
        mark = 0
    with psycopg.connect(settings.warehouse_dsn) as conn:
        committed = store.committed_since(conn, pipeline_name, context["run_id"], int(mark))
    if committed.rows_written == 0:
        raise AirflowSkipException(
            f"no rows committed by this run ({committed.line()}): no event for asset {asset.uri}"
        )
    extra: dict[str, Any] = {  # JSON: the asset event's extra
        "pipeline": pipeline_name,
        "run_id": context["run_id"],
        "rows_written": committed.rows_written,
        "records_read": committed.records_read,
        "rows_rejected": committed.rows_rejected,
        "ranges": list(committed.ranges[:50]),  # a long backfill: the first 50
    }
    context["outlet_events"][asset].extra = extra
    log.info("asset %s updated: %s", asset.uri, committed.line())
    return extra


@task(task_id="verify")
def verify(pipeline_name: str) -> dict:
    """Step 6: `dbt build` of the invariants I1-I6; a failure fails the run and says where. The marts are
    built by the pipeline's marts DAG, scheduled on the asset `announce` emits after this check."""
    from eosflow.verify import verify_pipeline

    result = verify_pipeline(EosflowHook().settings(), pipeline_name, marts=False)
    log.info("dbt build for pipeline %s:\n%s", pipeline_name, result.table())
    if not result.ok:
        first = result.failed[0] if result.failed else None
        raise AirflowFailException(
            f"verification of pipeline {pipeline_name} failed: "
            + (
                " / ".join(line.strip() for line in first.describe().splitlines()[:2])
                if first
                else f"dbt exited {result.returncode}; see the output above"
            )
            + f" ({len(result.failed)} check(s) failed in all)"
        )
    return {"pipeline": pipeline_name, "checks": len(result.checks)}


def _max_mapped_tasks() -> int:
    """How many spark_chunk tasks Airflow will map: more fail the run after validation, opaquely."""
    from airflow.configuration import conf

    return conf.getint("core", "max_map_length", fallback=1024)


def _refuse_another_pipeline(pipeline_name: str, asked: object) -> None:
    """A conf naming a pipeline (as the one backfill DAG of earlier eosflow took it) must name this DAG's:
    a tool still sending another name is told where to go, never served this pipeline instead."""
    if asked is not None and asked != pipeline_name:
        raise AirflowFailException(
            f"{backfill_dag_id(pipeline_name)} backfills pipeline {pipeline_name!r} only, and its conf asks "
            f"for {asked!r}: trigger {backfill_dag_id(str(asked))} for that one (the pipeline is the DAG's, "
            "not a param); nothing was run"
        )


@task(task_id="validate")
def validate_backfill(pipeline_name: str) -> list[list[str]]:
    """Check the whole backfill request before any Spark work; return one job argument list per chunk.

    The pipeline is the DAG's own (eosflow_backfill_<pipeline>), never a param: triggering that DAG is
    the right to replay that pipeline. A dry run (param dry_run) checks and lists the chunks the same
    way, then returns none.
    """
    context = get_current_context()
    _refuse_another_pipeline(pipeline_name, (context["dag_run"].conf or {}).get("pipeline"))
    return _backfill_chunks(pipeline_name, context)


@task(task_id="validate")
def validate_member_backfill(entry: str) -> list[list[str]]:
    """A database entry's backfill: the form's table must be one of the entry's members (never another
    pipeline: the entry's DAG grants no right to it); then as any pipeline's."""
    from eosflow import pipelines

    context = get_current_context()
    member = str(context["params"].get("member") or "")
    settings = EosflowHook().settings()
    declared = pipelines.load_databases(settings)[0].get(entry)
    if declared is None:
        raise AirflowFailException(f"{entry!r} is no longer a database entry of the pipelines file")
    known = pipelines.members(settings, declared)
    if member not in known:
        raise AirflowFailException(
            f"{backfill_dag_id(entry)} backfills the tables of {entry!r}, and {member or 'no table'!r} is "
            f"not one of its members: {', '.join(sorted(known)) or '(none discovered yet)'}; nothing was run"
        )
    return _backfill_chunks(member, context)


def _backfill_chunks(pipeline_name: str, context) -> list[list[str]]:
    from eosflow.ledger.backfill import BackfillError, BackfillRequest
    from eosflow.runners import backfill_run

    params, run_id = context["params"], context["run_id"]
    refused: tuple[type[Exception], ...] = (BackfillError, *_refusals())
    try:
        request = BackfillRequest(
            pipeline_name,
            params["mode"],
            BackfillRequest.parse_partitions(params.get("partitions")),
            params.get("from_offset"),
            params.get("to_offset"),
            BackfillRequest.parse_chunk_size(params.get("chunk_size")),  # 0 is refused, not the default
            topic=params.get("topic") or None,
        )
        chunks = backfill_run.resolve(
            EosflowHook().settings(),
            request,
            params.get("from_time") or None,
            params.get("to_time") or None,
            max_chunks=_max_mapped_tasks(),
        )
    except refused as exc:
        raise AirflowFailException(str(exc)) from None  # a bad request does not get better on retry
    dry_run = bool(params.get("dry_run", False))
    listed = [f"{c} ({c.span:,} offsets)" for c in chunks]
    log.info(
        "backfill %s of %s: %d chunk(s), %s in this order:\n%s",
        request.mode,
        request.pipeline,
        len(chunks),
        "would commit" if dry_run else "committed",
        "\n".join(f"  {c}" for c in listed),
    )
    context["ti"].xcom_push(key="chunks", value=listed)  # the list, readable in the XCom tab too
    context["ti"].xcom_push(key="ledger_mark", value=_ledger_mark(EosflowHook().settings()))
    if dry_run:
        # No chunk to map: spark_chunk expands to nothing and is skipped, and so is verify. The run ends
        # successful with nothing committed, and the grid shows at a glance that nothing ran.
        log.info("dry run: the request is valid; no Spark job runs and nothing is committed")
        return []
    return [
        [
            "--pipeline",
            request.pipeline,
            "--run-id",
            run_id,
            "--mode",
            request.mode,
            "--range",
            f"{c.topic}:{c.partition}:{c.start}-{c.end}",
        ]
        for c in chunks
    ]


@task(task_id="compact")
def compact_targets() -> dict[str, str]:
    """Merge what many small commits left, for every pipeline whose sink has something to compact
    (Sink.compact: the warehouse sink's partitioned targets). A refused pipeline is skipped, with its
    reason in the log: it stops no other pipeline's compaction (eosflow_config_errors.py names it)."""
    import psycopg

    from eosflow.ledger.migrate import migrate
    from eosflow.pipelines import load_each

    settings = EosflowHook().settings()
    migrate(settings.warehouse_dsn, log=log.info)
    declared, refused = load_each(settings)
    for name, error in refused.items():
        log.warning("pipeline %r is refused, not compacted: %s", name, error)
    done: dict[str, str] = {}
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        for name, pipeline in sorted(declared.items()):
            summary = pipeline.sink.compact(conn, pipeline, None, log.info)
            if summary is None:
                continue
            done[name] = summary.line()  # every sink's says what it did (an Iceberg table has no children)
            log.info("%s", done[name])
    return done


def publish_dag_id(publisher_name: str) -> str:
    return f"eosflow_publish_{publisher_name}"


@task(task_id="publish")
def publish_rows(publisher_name: str) -> dict:
    """The outbox's committed rows into Kafka, each batch with its position in one Kafka transaction."""
    from eosflow.pipelines import PipelineConfigError
    from eosflow.publish.declaration import load_publisher
    from eosflow.publish.run import PublisherFencedError, publish

    settings = EosflowHook().settings()
    try:
        summary = publish(settings, load_publisher(settings, publisher_name), log=log.info)
    except (PipelineConfigError, PublisherFencedError) as exc:
        raise AirflowFailException(str(exc)) from None  # a retry cannot help: fix, or let the newer one run
    log.info("%s", summary.line())
    if summary.rows == 0:  # the topic's asset is emitted only when rows went out
        raise AirflowSkipException(f"publisher {publisher_name}: no new rows; no event for its topic's asset")
    return {"rows": summary.rows, "transactions": summary.transactions}


@task(task_id="pipeline_health")
def pipeline_health(limits_s: dict[str, float]) -> dict:
    """Fails, with one line per pipeline, when records wait and a pipeline has not committed within its
    limit (seconds, per pipeline)."""
    from eosflow.observe.health import check

    settings = EosflowHook().settings()
    found = _judge("pipeline", {n: functools.partial(check, settings, n, lim) for n, lim in limits_s.items()})
    return {h.pipeline: {"lag": h.lag, "last_commit_age_s": h.last_commit_age_s} for h in found}


@task(task_id="publisher_health")
def publisher_health(names: list[str], limit_s: float) -> dict:
    """Fails, naming the transactions that hold them (pid, database, user, age; prepared gids), when an
    open transaction has held a publisher's committed rows back for longer than the limit: a publisher
    waits for every older transaction of the cluster, by design, and a forgotten one stalls it."""
    from eosflow.observe.health import check_publisher

    settings = EosflowHook().settings()
    found = _judge("publisher", {n: functools.partial(check_publisher, settings, n, limit_s) for n in names})
    return {h.publisher: {"held": h.held, "blocked_s": h.blocked_s} for h in found}


class _Judged(Protocol):
    """A health check's verdict."""

    @property
    def ok(self) -> bool: ...

    def line(self) -> str: ...


Judged = TypeVar("Judged", bound=_Judged)


def _judge(what: str, checks: dict[str, Callable[[], Judged]]) -> list[Judged]:
    """Run every check and log its verdict; fail without retry when one is stale (the next run looks
    again), with retries when some could not be checked (Kafka or Postgres out of reach: a retry may see
    them back). One's trouble never hides the others' verdicts."""
    found, unchecked = [], []
    for name, check in checks.items():
        try:
            found.append(check())
        except Exception as exc:  # noqa: BLE001 - reported beside the others' verdicts
            first = str(exc).splitlines()[0] if str(exc) else ""
            unchecked.append(f"{what} {name}: could not be checked: {type(exc).__name__}: {first}")
    for health in found:
        log.info("%s", health.line())
    for line in unchecked:
        log.error("%s", line)
    stale = [h.line() for h in found if not h.ok]
    if stale:
        raise AirflowFailException("; ".join(stale + unchecked))
    if unchecked:
        raise RuntimeError("; ".join(unchecked))
    return found


@task(task_id="dbt_marts")
def build_marts(pipeline_name: str) -> dict:
    """`dbt build` of the pipeline's marts and their tests, after its output asset was updated."""
    from eosflow.verify import build_marts as dbt_marts

    result = dbt_marts(EosflowHook().settings(), pipeline_name)
    log.info("%s\n%s", result.table(), result.output[-3000:] if not result.ok else "")
    if not result.ok:
        first = result.failed[0] if result.failed else None
        raise AirflowFailException(
            f"the marts of pipeline {pipeline_name} did not build: "
            + (first.describe().splitlines()[0].strip() if first else f"dbt exited {result.returncode}")
        )
    return {"pipeline": pipeline_name, "nodes": len(result.checks)}
