"""The Python tasks of the eosflow DAGs. Each logs a short summary and fails with one clear line."""

from __future__ import annotations

import logging

from airflow.sdk import get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from eosflow_airflow.hooks import EosflowHook

log = logging.getLogger(__name__)


@task(task_id="plan")
def plan(pipeline_name: str) -> dict:
    """Step 1: persist this run's plan before Spark starts; a retried run finds and reuses it."""
    from eosflow.ingest import job
    from eosflow.ingest.submit import package

    settings = EosflowHook().settings()
    run_id = get_current_context()["run_id"]
    planned, status = job.prepare(settings, pipeline_name, run_id, log=log.info)
    package(settings)  # the code the Spark task ships with --py-files, fresh for every run
    lines = [f"{'partition':<24}{'start':>12}{'end':>12}{'offsets':>12}{'lag after':>12}"]
    for part in planned.partitions:
        r = part.range
        lines.append(
            f"{f'{r.topic}[{r.partition}]':<24}{r.start:>12,}{r.end:>12,}{r.span:>12,}{part.lag_after:>12,}"
            + ("  (first range)" if part.first_seen else "")
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


@task(task_id="verify")
def verify(pipeline_name: str | None = None) -> dict:
    """Step 6: `dbt build` (invariants I1-I6, then the marts); a failure fails the run and says where."""
    from eosflow.verify import verify_pipeline

    name = pipeline_name or get_current_context()["params"]["pipeline"]
    result = verify_pipeline(EosflowHook().settings(), name)
    log.info("dbt build for pipeline %s:\n%s", name, result.table())
    if not result.ok:
        first = result.failed[0] if result.failed else None
        raise AirflowFailException(
            f"verification of pipeline {name} failed: "
            + (
                " / ".join(line.strip() for line in first.describe().splitlines()[:2])
                if first
                else f"dbt exited {result.returncode}; see the output above"
            )
            + f" ({len(result.failed)} check(s) failed in all)"
        )
    return {"pipeline": name, "checks": len(result.checks)}


@task(task_id="validate")
def validate_backfill() -> list[list[str]]:
    """Check the whole backfill request before any Spark work; return one job argument list per chunk."""
    from eosflow.ingest import backfill_run
    from eosflow.ingest.backfill import BackfillError, BackfillRequest

    context = get_current_context()
    params, run_id = context["params"], context["run_id"]
    try:
        request = BackfillRequest(
            params["pipeline"],
            params["mode"],
            BackfillRequest.parse_partitions(params.get("partitions")),
            params.get("from_offset"),
            params.get("to_offset"),
            int(params.get("chunk_size") or 100_000),
        )
        chunks = backfill_run.resolve(
            EosflowHook().settings(), request, params.get("from_time") or None, params.get("to_time") or None
        )
    except BackfillError as exc:
        raise AirflowFailException(str(exc)) from None  # a bad request does not get better on retry
    log.info(
        "backfill %s of %s: %d chunk(s), committed in this order:\n%s",
        request.mode,
        request.pipeline,
        len(chunks),
        "\n".join(f"  {c}" for c in chunks),
    )
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
