"""A schema's target table: the DDL that makes it, and what an existing table lacks or contradicts.

Pure: eosflow.ledger.store runs the statements. An existing target is compared with the declaration
column by column. A declared optional column it lacks is added (earlier rows read NULL); anything
else that differs would change what committed rows mean, so it is refused with what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from eosflow.schema.declaration import RecordSchema

# Postgres' format_type() spelling of each declared type's column, where it differs.
_FORMATTED = {
    "timestamptz": "timestamp with time zone",
    "integer": "integer",
    "double precision": "double precision",
}


def formatted(postgres_type: str) -> str:
    """A declared column's type as format_type() prints it, for comparing with the catalog."""
    if postgres_type.endswith("[]"):
        return formatted(postgres_type[:-2]) + "[]"
    return _FORMATTED.get(postgres_type, postgres_type)


def target_columns(schema: RecordSchema) -> list[tuple[str, str, bool]]:
    """(name, Postgres type, not null) of every target column, in order."""
    return [
        ("kafka_topic", "text", True),
        ("kafka_partition", "integer", True),
        ("kafka_offset", "bigint", True),
        ("kafka_timestamp", "timestamptz", False),
        ("kafka_key", _key_type(schema), False),
        ("kafka_headers", "jsonb", True),
        # A change stream's changelog holds deletes (only the key in their image), tombstones and
        # truncates (no key): no declared column is NOT NULL there (the state table's key is).
        *((c.name, c.type.postgres, c.required and schema.changes is None) for c in schema.columns),
        ("batch_id", "text", True),
        ("transform_version", "text", True),
        # eosflow.declarations: NULL in rows of targets made before versions were recorded.
        ("declaration_version", "integer", False),
    ]


def _key_type(schema: RecordSchema) -> str:
    if schema.key_type is not None:
        return schema.key_type.postgres
    return "bytea" if schema.key == "bytes" else "text"


def create_table(table: str, schema: RecordSchema, keyed: bool) -> sql.Composed:
    """`create table if not exists`; keyed: partitioned by offset range, the offsets as primary key (I1)."""
    parts: list[sql.Composable] = [
        sql.SQL("{} {}{}").format(
            sql.Identifier(name),
            sql.SQL(pg_type),
            sql.SQL(" not null") if not_null else sql.SQL(""),
        )
        + (sql.SQL(" default '[]'") if name == "kafka_headers" else sql.SQL(""))
        for name, pg_type, not_null in target_columns(schema)
    ]
    if not keyed:
        return sql.SQL("create table if not exists {} ({})").format(
            sql.Identifier(*table.split(".")), sql.SQL(", ").join(parts)
        )
    # Partitioned by offset range, a child per committed range (eosflow.sinks.postgres.partitions): the
    # key refuses overlapping ranges (I1) and a commit attaches its staged children.
    parts.append(sql.SQL("primary key (kafka_topic, kafka_partition, kafka_offset)"))
    return sql.SQL(
        "create table if not exists {} ({}) partition by range (kafka_topic, kafka_partition, kafka_offset)"
    ).format(sql.Identifier(*table.split(".")), sql.SQL(", ").join(parts))


@dataclass(frozen=True)
class Existing:
    name: str
    type: str  # format_type(atttypid, atttypmod)
    not_null: bool


class IncompatibleTargetError(ValueError):
    """The target holds committed rows of another shape; the message says what to do."""


def additions(
    table: str, schema: RecordSchema, existing: list[Existing], pipeline: str
) -> list[sql.Composed]:
    """The ALTER TABLEs that bring `existing` to the declaration, or IncompatibleTargetError."""
    have = {e.name: e for e in existing}
    declared = target_columns(schema)
    names = {name for name, _, _ in declared}
    problems = []
    adds = []
    for name, pg_type, not_null in declared:
        column = have.get(name)
        if column is None:
            if not_null:
                problems.append(f"required column {name} is new (earlier rows have no value for it)")
            else:
                adds.append(
                    sql.SQL("alter table {} add column {} {}").format(
                        sql.Identifier(*table.split(".")), sql.Identifier(name), sql.SQL(pg_type)
                    )
                )
            continue
        if column.type != formatted(pg_type):
            problems.append(f"column {name} is {column.type} in the table but declared {pg_type}")
        elif not_null and not column.not_null:
            problems.append(f"column {name} is declared required but the table allows NULL in it")
    for e in existing:
        if e.name not in names:
            problems.append(f"column {e.name} is in the table but no longer declared")
    if problems:
        raise IncompatibleTargetError(
            f"pipeline {pipeline!r}: the declaration does not fit {table}, which holds committed rows: "
            + "; ".join(problems)
            + ". Only adding optional columns migrates a target in place. Restore the declaration, or "
            "re-ingest into a new table: declare a new pipeline (a new name and target_table), which reads "
            "the topics from their start."
        )
    return adds
