"""A `database:` entry of pipelines.yml, and the pipeline spec of each of its members (pure).

An entry names a Debezium connector's table topics (`<topic_prefix>.<schema>.<table>`) and the settings its
members share; each table discovered (eosflow.databases.discover) becomes a member, a pipeline of its own
whose spec is the entry's shared settings, its topic, its discovered columns and its derived targets
(docs/DESIGN.md, "A whole database in one declaration").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eosflow import names
from eosflow.databases.schema_block import TableShape
from eosflow.errors import PipelineConfigError

# The entry's own keys; the rest is shared by its members as any pipeline's settings.
_ENTRY_KEYS = frozenset({"database", "target_schema", "members"})
# A member's own, derived from its table: refused on the entry.
_PER_TABLE = ("topics", "columns", "primary_key", "target_table", "state_table", "business_key")
_DATABASE_KEYS = frozenset({"topic_prefix", "schemas", "tables"})
_OVERRIDE_KEYS = frozenset({"name", "target_table", "state_table", "primary_key"})
# Debezium's table topic: <prefix>.<schema>.<table>; the prefix may hold dots, schema and table may not
# (a topic name's legal characters otherwise).
_PART = r"[A-Za-z0-9_-]+"
_CHANGELOG_SUFFIX = "__changes"


@dataclass(frozen=True)
class Database:
    """One `database:` entry: what it admits, how its members are named, what they share."""

    name: str
    topic_prefix: str
    schemas: tuple[str, ...]  # empty: every schema
    tables: tuple[str, ...]  # "schema.table"; empty: every table of the admitted schemas
    target_schema: str
    shared: tuple[tuple[str, Any], ...]  # the members' common settings, as written (sorted items)
    overrides: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]

    def table_of(self, topic: str) -> tuple[str, str] | None:
        """(schema, table) if `topic` is one of this database's admitted table topics, else None."""
        found = re.fullmatch(re.escape(self.topic_prefix) + rf"\.({_PART})\.({_PART})", topic)
        if found is None:
            return None
        schema, table = found.group(1), found.group(2)
        if self.schemas and schema not in self.schemas:
            return None
        if self.tables and f"{schema}.{table}" not in self.tables:
            return None
        return schema, table

    def override(self, schema: str, table: str) -> dict[str, Any]:
        return dict(dict(self.overrides).get(f"{schema}.{table}", ()))

    def names_member(self, name: str) -> bool:
        """Whether an override gives a member this name."""
        return any(dict(own).get("name") == name for _, own in self.overrides)

    def member_name(self, schema: str, table: str) -> str:
        own = self.override(schema, table).get("name")
        if own is not None:
            return str(own)
        return names.fitted(f"{self.name}__{_local(schema, table)}")

    def member_spec(self, schema: str, table: str, topic: str, shape: TableShape) -> dict[str, Any]:
        """The member's pipeline spec, for eosflow.pipelines to parse as any pipeline's."""
        own = self.override(schema, table)
        state = own.get("state_table") or (
            f"{self.target_schema}.{names.fitted(_local(schema, table), names.TARGET_TABLE_BYTES)}"
        )
        changelog = own.get("target_table") or (
            f"{self.target_schema}."
            + names.fitted(_local(schema, table) + _CHANGELOG_SUFFIX, names.TARGET_TABLE_BYTES)
        )
        return dict(self.shared) | {
            "topics": [topic],
            "columns": [dict(c) for c in shape.columns],
            "primary_key": list(own.get("primary_key") or shape.primary_key),
            "target_table": changelog,
            "state_table": state,
        }


def _local(schema: str, table: str) -> str:
    """A table's part of the names derived from it: the table in `public`, schema__table elsewhere, in
    lower case with anything not a name's character as _."""
    text = table if schema == "public" else f"{schema}__{table}"
    return re.sub(r"[^a-z0-9_]", "_", text.lower())


def is_database(spec: object) -> bool:
    return isinstance(spec, Mapping) and "database" in spec


def parse(raw_name: object, spec: Mapping[str, Any], where: str) -> Database:
    """The entry, or PipelineConfigError naming `where`, the key and what is expected."""
    name = names.pipeline_name(raw_name, where)
    db = spec.get("database")
    if not isinstance(db, Mapping) or not isinstance(db.get("topic_prefix"), str):
        raise PipelineConfigError(
            f"{where}: database must be a mapping with topic_prefix (Debezium's topic.prefix) and optional "
            "schemas and tables lists"
        )
    if unknown := sorted(set(db) - _DATABASE_KEYS):
        raise PipelineConfigError(
            f"{where}: database: unknown key(s) {unknown}; known: {sorted(_DATABASE_KEYS)}"
        )
    prefix = db["topic_prefix"]
    if not names.topic(prefix) or prefix.endswith("."):
        raise PipelineConfigError(
            f"{where}: database.topic_prefix {prefix!r} must be the start of Kafka topic names (letters, "
            "digits, '.', '_', '-'), without the dot before the schema"
        )
    schemas = _names_list(db.get("schemas", []), "database.schemas", where)
    tables = tuple(
        t if "." in t else f"public.{t}" for t in _names_list(db.get("tables", []), "database.tables", where)
    )
    if spec.get("changes") != "debezium":
        raise PipelineConfigError(
            f"{where}: a database entry reads Debezium's table topics: add changes: debezium"
        )
    if misplaced := [k for k in _PER_TABLE if k in spec]:
        raise PipelineConfigError(
            f"{where}: {misplaced} are each table's own: discovery derives them; override one table's under "
            "members: {<schema>.<table>: {...}} (name, target_table, state_table, primary_key)"
        )
    sink = spec.get("sink", "warehouse")
    if sink != "warehouse":
        raise PipelineConfigError(
            f"{where}: sink: {sink} does not take database: yet (it cannot derive each table's output from "
            "the entry); use the warehouse sink with target_schema, or one pipeline per table"
        )
    target_schema = spec.get("target_schema")
    if not isinstance(target_schema, str) or not names.COLUMN.fullmatch(target_schema):
        raise PipelineConfigError(
            f"{where}: target_schema must be the warehouse schema of the tables' replicas (lower-case "
            "letters, digits and _), e.g. target_schema: replica"
        )
    names.table(f"{target_schema}.t", "target_schema", where)  # the checks every sink's schema gets
    overrides = _overrides(spec.get("members", {}), where)
    shared = {k: v for k, v in spec.items() if k not in _ENTRY_KEYS}
    return Database(name, prefix, schemas, tables, target_schema, tuple(sorted(shared.items())), overrides)


def _names_list(value: object, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, str) and re.fullmatch(rf"({_PART}\.)?{_PART}", v) for v in value
    ):
        raise PipelineConfigError(
            f"{where}: {key} must be a list of names as Debezium's topics spell them (letters, digits, _ -)"
        )
    return tuple(value)


def _overrides(value: object, where: str) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
    if not isinstance(value, Mapping):
        raise PipelineConfigError(f"{where}: members must map <schema>.<table> to that table's overrides")
    out = []
    for table, own in value.items():
        if not isinstance(table, str) or not re.fullmatch(rf"{_PART}\.{_PART}", table):
            raise PipelineConfigError(f"{where}: members: {table!r} is not <schema>.<table>")
        if not isinstance(own, Mapping) or set(own) - _OVERRIDE_KEYS:
            raise PipelineConfigError(f"{where}: members.{table} may set {sorted(_OVERRIDE_KEYS)} only")
        out.append((table, tuple(sorted(own.items()))))
    return tuple(sorted(out))
