"""`eosflow verify` for an Iceberg sink: dbt's invariants I1-I6 over what a PyIceberg scan of the table reads.

A reader that is not eosflow's write path (PyIceberg, the table's current snapshot) reads the rows'
Kafka coordinates, batch and business key; they are copied into the warehouse as
`eosflow_iceberg.<pipeline>` (an unlogged table, made for this check and dropped after it), and the
project's dbt tests run on it as on a warehouse target: the same tests, the same names (I1-I6), the same
stored failures, the same record in eosflow.checks for the view and the metrics.

Why a copy and not dbt-duckdb over the files: the ledger the invariants compare with is in Postgres, so
one side has to travel either way; DuckDB reaches Postgres and Iceberg through extensions it downloads at
run time (extensions.duckdb.org, unreachable from an air-gapped warehouse, and from this project's
machines), and a second dialect would mean a second definition of every invariant. The copy is the
coordinates only (tens of bytes a row), in one COPY from Arrow.

It also warns, without failing, about data files whose names not every reader opens (names.py: an older
eosflow put the batch id, colons and all, in them; Spark and other Hadoop-based readers fail on them),
and names the fix: `eosflow compact` rewrites them.
"""

from __future__ import annotations

import dataclasses
import io

import psycopg
from psycopg import sql

from eosflow.dbt_build import CheckResult, VerifyResult, run_dbt
from eosflow.settings import Settings
from eosflow.sinks.protocol import Pipeline

SCHEMA = "eosflow_iceberg"
FILE_NAMES_CHECK = "iceberg_file_names"
COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset", "batch_id")


def verify_iceberg_sink(settings: Settings, pipeline: Pipeline, table_name: str) -> VerifyResult:
    """dbt's I1-I6 for the pipeline, its output read from the Iceberg table `table_name` (the orders
    marts are warehouse tables: not built for an Iceberg pipeline)."""
    from eosflow.sinks.iceberg.catalog import load

    key = pipeline.schema.business_key
    columns = COORDINATES + ((key,) if key and key not in COORDINATES else ())
    table = load(settings, table_name)
    rows = table.scan(selected_fields=columns).to_arrow().select(list(columns))
    copy = sql.Identifier(SCHEMA, pipeline.name)
    with psycopg.connect(settings.warehouse_dsn) as conn:
        conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("drop table if exists {} cascade").format(copy))
        conn.execute(
            sql.SQL(
                "create unlogged table {} (kafka_topic text not null, kafka_partition int not null, "
                "kafka_offset bigint not null, batch_id text not null{})"
            ).format(
                copy,
                sql.SQL(", {} text").format(sql.Identifier(key))
                if key is not None and len(columns) > 4
                else sql.SQL(""),
            )
        )
        with conn.cursor().copy(sql.SQL("copy {} from stdin (format csv, header true)").format(copy)) as out:
            out.write(_csv(rows))
    try:
        result = run_dbt(settings, pipeline.name, f"{SCHEMA}.{pipeline.name}", business_key=key, marts=False)
        warning = file_name_warning(table, pipeline.name)
        return result if warning is None else dataclasses.replace(result, checks=(*result.checks, warning))
    finally:
        with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("drop table if exists {} cascade").format(copy))


def file_name_warning(table, pipeline_name: str) -> CheckResult | None:
    """A warning (status warn: shown, kept, not failing) if the table's current snapshot holds data files
    whose names not every reader opens; None if it holds none."""
    from eosflow.sinks.iceberg.names import readable_name

    if table.current_snapshot() is None:
        return None
    # Not inspect.files(): PyIceberg 0.12 fails on a snapshot with no manifest (a table whose commits all
    # added no data file: every record rejected), which plan_files reads as no file.
    paths = [task.file.file_path for task in table.scan().plan_files()]
    unreadable = [p for p in paths if not readable_name(p)]
    if not unreadable:
        return None
    n = len(unreadable)
    message = (
        f"{n} data file{'s' * (n != 1)} of {'.'.join(table.name())} ha{'ve' if n != 1 else 's'} a name that "
        f"Spark, Flink, Hive and other Hadoop-based readers cannot open (a ':' is read as a URI scheme), "
        f"e.g. {unreadable[0]}; PyIceberg reads them. Fix: eosflow compact --pipeline {pipeline_name} "
        "(rewrites them under safe names, same rows)"
    )
    return CheckResult(FILE_NAMES_CHECK, None, "warn", n, message=message)


def _csv(rows) -> bytes:
    """The rows as CSV for COPY; a business key that is not text or an integer as its Python text (a
    uuid's canonical form): I6 compares keys as text, and any one rendering of each value will do."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    columns = []
    for field, column in zip(rows.schema, rows.columns, strict=True):
        if not (pa.types.is_integer(field.type) or pa.types.is_string(field.type)):
            column = pa.array([None if v is None else str(v) for v in column.to_pylist()], pa.string())
        columns.append(column)
    buffer = io.BytesIO()
    pacsv.write_csv(pa.Table.from_arrays(columns, names=rows.column_names), buffer)
    return buffer.getvalue()
