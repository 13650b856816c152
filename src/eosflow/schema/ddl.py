"""A schema's target table: the DDL that makes it, and what an existing table lacks or contradicts.

Pure: eosflow.sinks.postgres.target runs the statements. An existing target is compared with the
declaration column by column, by the rules of eosflow.schema.evolution: what loses nothing becomes an
ALTER TABLE; what would change what committed rows mean is refused with the statement that would do it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from psycopg import sql

from eosflow.schema import evolution, text_from
from eosflow.schema.declaration import RecordSchema
from eosflow.schema.evolution import Column, Kind, Problem, Refusal
from eosflow.schema.types import parse_type


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


@dataclass(frozen=True)
class Migration:
    """The statements that bring a target to its declaration, and what the run's log says of them."""

    statements: list[sql.Composed]
    notes: list[str]
    retypes: bool = False  # a column's type changes: Postgres refuses it under a view that reads the table


def spelling(postgres_type: str) -> str:
    """A Postgres type (as declared or as format_type prints it) in the declaration's spelling."""
    if postgres_type.endswith("[]"):
        return spelling(postgres_type[:-2]) + "[]"
    return _SPELLED.get(postgres_type, postgres_type)


_SPELLED = {"timestamp with time zone": "timestamptz", "double precision": "double"}


def migration(
    table: str,
    schema: RecordSchema,
    existing: list[Existing],
    pipeline: str,
    renamed: Mapping[str, str] | None = None,
) -> Migration:
    """What brings `existing` to the declaration (docs/DESIGN.md, "Declarations that evolve"), or
    IncompatibleTargetError naming each statement that would. renamed: {new column: old} (evolve's)."""
    was = {c.name: c.type.text_from for c in schema.columns}
    declared = [
        Column(name, spelling(t), not_null, was.get(name)) for name, t, not_null in target_columns(schema)
    ]
    have = {e.name: e for e in existing}
    found = evolution.evolve(
        declared,
        [Column(e.name, spelling(e.type), e.not_null) for e in existing],
        renamed=renamed,
    )
    if found.refusals:
        raise IncompatibleTargetError(
            f"pipeline {pipeline!r}: the declaration does not fit {table}, which holds committed rows: "
            + "; ".join(f"{r} ({_remedy(table, r)})" for r in found.refusals)
            + ". Or re-ingest into a new table: declare a new pipeline (a new name and target_table), "
            "which reads the topics from their start."
        )
    target = sql.Identifier(*table.split("."))
    pg_types = {name: t for name, t, _ in target_columns(schema)}
    statements: list[sql.Composed] = []
    notes: list[str] = []
    for change in found.changes:
        column = sql.Identifier(change.column)
        type_ = sql.SQL(pg_types.get(change.column, ""))  # validated by the declaration (types.parse_type)
        if change.kind == Kind.ADD:
            statements.append(sql.SQL("alter table {} add column {} {}").format(target, column, type_))
        elif change.kind == Kind.WIDEN:
            statements.append(sql.SQL("alter table {} alter column {} type {}").format(target, column, type_))
        elif change.kind == Kind.RELAX or have[change.column].not_null:
            statements.append(sql.SQL("alter table {} alter column {} drop not null").format(target, column))
        notes.append(f"{table}: {change}")  # a column retired before: nothing left to do but say it
    if any(c.kind == Kind.WIDEN and c.type == "text" for c in found.changes):
        statements[:0] = text_output_settings()  # each stored value's text, as the records' is written
    return Migration(statements, notes, retypes=any(c.kind == Kind.WIDEN for c in found.changes))


def text_output_settings() -> list[sql.Composed]:
    """For the transaction of an `ALTER ... TYPE text` (`text_from`): the settings the old type's text
    output depends on (a timestamptz's zone and style, a double's digits), as eosflow.schema.text_from
    writes the same values from records."""
    return [
        sql.SQL("select set_config({}, {}, true)").format(sql.Literal(name), sql.Literal(value))
        for name, value in text_from.ALTER_SETTINGS.items()
    ]


def _remedy(table: str, refusal: Refusal) -> str:
    """The statement that makes the target fit, as a user would run it (names and types are validated)."""
    column = refusal.column
    if refusal.problem == Problem.TYPE:
        want = refusal.want or ""
        postgres = parse_type(want).postgres
        rounds = ""
        h, w = evolution.numeric(refusal.have or ""), evolution.numeric(want)
        if h and w and w[1] < h[1]:
            rounds = f"; it rounds every value to {w[1]} decimals"
        if want == "text" and text_from.takes(refusal.have or ""):  # the explicit choice eosflow applies
            return (
                f"declare `text_from: {refusal.have}` on the column: the next run makes it text, each stored "
                "value its text, and takes the old type's values from records as their text"
            )
        return (
            f"`alter table {table} alter column {column} type {postgres} using {column}::{postgres}` "
            f"makes it fit if every stored value converts: Postgres refuses it otherwise{rounds}"
        )
    if refusal.problem == Problem.REQUIRED:
        return f"`alter table {table} alter column {column} set not null`, refused while a row holds NULL"
    if refusal.problem == Problem.RENAMED:
        return f"`alter table {table} rename column {refusal.have} to {column}` keeps every row's value"
    return "declare it optional"


class IncompatibleTargetError(ValueError):
    """The target holds committed rows of another shape; the message says what to do."""
