"""Step 4: write a batch's output and rejected rows to staging, keyed by batch_id.

Re-staging the same batch replaces it: its old staged rows are deleted first. Executors write
over JDBC in parallel, so driver memory does not grow with the batch.
"""

from __future__ import annotations

import psycopg

from eosflow.ingest.pipelines import Pipeline
from eosflow.ingest.store import staging_table
from eosflow.settings import Settings


def jdbc_url(settings: Settings) -> str:
    # stringtype=unspecified lets Postgres cast text to the uuid and jsonb columns.
    return (
        f"jdbc:postgresql://{settings.pg_host}:{settings.pg_port}/{settings.pg_database}"
        "?reWriteBatchedInserts=true&stringtype=unspecified"
    )


def stage(settings: Settings, pipeline: Pipeline, batch_id: str, valid, rejected) -> None:
    table = staging_table(pipeline)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        conn.execute(f"delete from {table} where batch_id = %s", (batch_id,))
        conn.execute("delete from staging.rejected where batch_id = %s", (batch_id,))
    props = {
        "user": settings.pg_user,
        "password": settings.pg_password,
        "driver": "org.postgresql.Driver",
        "batchsize": "10000",
    }
    valid.write.jdbc(jdbc_url(settings), table, mode="append", properties=props)
    rejected.write.jdbc(jdbc_url(settings), "staging.rejected", mode="append", properties=props)
