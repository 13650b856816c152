"""Step 6 of the contract: check what a pipeline's sink holds, and keep the verdict.

`verify_pipeline` asks the pipeline's sink (Sink.verify): the warehouse sink runs the dbt project on its
table (eosflow.dbt_build); the Kafka sink reads its topics back (eosflow.sinks.kafka.verify). The arrow
points one way: verify asks the sink, and a sink never imports this module
(tests/unit/project/test_layers.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg

from eosflow.dbt_build import VerifyResult, run_dbt
from eosflow.rows import one_row
from eosflow.settings import Settings

if TYPE_CHECKING:
    from eosflow.sinks.protocol import Verdict


def verify_pipeline(settings: Settings, pipeline_name: str, marts: bool = True) -> Verdict:
    """The invariants I1-I6 and the marts of one configured pipeline (what `eosflow verify` runs).

    marts=False: the invariants alone (the ingest DAGs' check; their marts DAGs build the marts).
    """
    from eosflow import pipelines

    pipeline = pipelines.load(settings, pipeline_name)
    result = pipeline.sink.verify(settings, pipeline, marts)
    record(settings, result)
    return result


def build_marts(settings: Settings, pipeline_name: str) -> VerifyResult:
    """`dbt build` of the orders marts (tag `orders`) and their tests for one pipeline; not recorded
    in eosflow.checks, which keeps the invariants' verdicts."""
    from eosflow import pipelines

    pipeline = pipelines.load(settings, pipeline_name)
    return run_dbt(
        settings,
        pipeline.name,
        pipeline.target_table,
        select=["tag:orders"],
        business_key=pipeline.schema.business_key,
        purpose="marts",
    )


def record(settings: Settings, result: Verdict) -> None:
    """Keep the verdicts in eosflow.checks, where the Airflow view and the metrics read them."""
    from eosflow.ledger.migrate import migrate

    rows = result.check_rows()
    if not rows:
        rows = [("dbt", None, "error", 0, "[]", f"dbt did not run (exit {result.returncode})")]
    migrate(settings.warehouse_dsn, log=lambda m: None)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        (now,) = one_row(conn.execute("select clock_timestamp()"))
        with conn.cursor() as cur:
            cur.executemany(
                "insert into eosflow.checks (pipeline, checked_at, name, invariant, status, failures, rows, "
                "message) values (%s, %s, %s, %s, %s, %s, %s, %s) on conflict do nothing",
                [(result.pipeline, now, *r) for r in rows],
            )
