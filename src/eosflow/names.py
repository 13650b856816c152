"""The names a declaration may use, as eosflow, Postgres and Kafka accept them: checked the same way for
pipelines, publishers and sinks (docs/DESIGN.md, "Trust boundaries", Names).

Every pattern is anchored with \\A and \\Z and meant for `fullmatch`: `$` also matches before a trailing
newline, and `raw.t1\\n` once passed as a table that COPY then read as `raw.t1`.
"""

from __future__ import annotations

import hashlib
import re
from typing import TypeGuard

from eosflow.errors import PipelineConfigError

NAME = re.compile(r"\A[a-z][a-z0-9_]*\Z")  # a pipeline's or a publisher's name
TABLE = re.compile(r"\A[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*\Z")  # schema.table, in lower case
COLUMN = re.compile(r"\A[a-z_][a-z0-9_]*\Z")
TOPIC = re.compile(r"\A[A-Za-z0-9._-]{1,249}\Z")  # Kafka's legal topic names

# Postgres keeps NAMEDATALEN - 1 bytes of an identifier and silently cuts the rest: two longer names that
# share their first 63 bytes would be one table (the names here are ASCII: a character is a byte).
IDENTIFIER_BYTES = 63
# The longest identifier eosflow makes from a pipeline's name is dbt's schema of the checks' failures,
# analytics_failures_<pipeline> (dbt_project/macros/generate_schema_name.sql): it must fit as well.
_LONGEST_PIPELINE_PREFIX = "analytics_failures_"
PIPELINE_NAME_BYTES = IDENTIFIER_BYTES - len(_LONGEST_PIPELINE_PREFIX)  # 44
# A warehouse target's index in the comparison modes is <table>_offsets (sinks/postgres/target.py).
_TARGET_SUFFIX = "_offsets"
TARGET_TABLE_BYTES = IDENTIFIER_BYTES - len(_TARGET_SUFFIX)  # 55

_NAME_RULE = "names are lower-case letters, digits and _ , starting with a letter"


def fitted(name: str, limit: int = PIPELINE_NAME_BYTES) -> str:
    """`name` if it fits in `limit` bytes, else its beginning and a hash of the whole: for the tools that
    make a name of several parts (the lab, the bench), still unique and still readable."""
    if len(name.encode()) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - len(digest) - 1]}_{digest}"


# Who keeps each schema a declaration may not write into, and why (owned_schema).
_OWNERS = {
    "eosflow": "eosflow's own (its ledger in eosflow, its staging in staging, the copies `eosflow verify` "
    "makes and drops in eosflow_iceberg; eosflow_* is kept for it)",
    "dbt": "dbt's (the checks' marts and stored failures: analytics, analytics_failures and their "
    "per-pipeline analytics_<pipeline>, analytics_failures_<pipeline>, rebuilt by every `eosflow verify`)",
    "Postgres": "Postgres' own (its catalogs: information_schema, pg_*)",
}


def owned_schema(schema: str) -> str | None:
    """Who keeps `schema` for itself: "eosflow", "dbt" or "Postgres"; None when a declaration may use it."""
    if schema in ("eosflow", "staging") or schema.startswith("eosflow_"):
        return "eosflow"
    if schema == "analytics" or schema.startswith("analytics_"):
        return "dbt"
    if schema == "information_schema" or schema.startswith("pg_"):
        return "Postgres"
    return None


# Who keeps each topic a declaration may not write into (owned_topic).
_TOPIC_OWNERS = {
    "eosflow": "eosflow's own (eosflow.*: a publisher's positions are in "
    "eosflow.publish.offsets.<publisher>)",
    "Kafka": "Kafka's own (_*: the brokers' __consumer_offsets and __transaction_state, the schema "
    "registry's _schemas, and other tools' internal topics)",
}


def owned_topic(topic: str) -> str | None:
    """Who keeps `topic` for itself: "eosflow" or "Kafka"; None when a declaration may write it."""
    if topic.startswith("eosflow."):
        return "eosflow"
    if topic.startswith("_"):
        return "Kafka"
    return None


def output_topic(value: object, key: str, where: str, why: str = "") -> str:
    """`value` as a topic a pipeline or a publisher may write: a Kafka topic name, matched whole, that no
    one else keeps (owned_topic). `why` is added to the message when the name itself is wrong."""
    if not topic(value):
        raise PipelineConfigError(
            f"{where}: {key} {value!r} must be a Kafka topic name (letters, digits, '.', '_', '-'){why}"
        )
    owner = owned_topic(value)
    if owner is not None:
        raise PipelineConfigError(
            f"{where}: {key} {value!r} is {_TOPIC_OWNERS[owner]}; a declaration may not write there: "
            "name a topic of its own"
        )
    return value


def pipeline_name(name: object, where: str) -> str:
    """A pipeline's name, or a PipelineConfigError saying what is wrong with it."""
    why = f"Postgres schemas are named after it, the longest {_LONGEST_PIPELINE_PREFIX}<pipeline> (dbt's)"
    text = _name(name, where, PIPELINE_NAME_BYTES, why + ", and must fit Postgres' 63")
    # dbt's schema of a pipeline's marts is analytics_<pipeline>: for failures or failures_x that is the
    # schema where dbt keeps the orders pipeline's (or pipeline x's) stored failures.
    if text == "failures" or text.startswith("failures_"):
        owner = "orders" if text == "failures" else text.removeprefix("failures_")
        raise PipelineConfigError(
            f"{where}: a pipeline's name may not be failures or start with failures_: dbt's schema of its "
            f"marts, analytics_{text}, is where dbt stores the failures of pipeline {owner!r}'s checks; "
            "name it otherwise"
        )
    return text


def publisher_name(name: object, where: str) -> str:
    """A publisher's name, or a PipelineConfigError saying what is wrong with it."""
    return _name(name, where, IDENTIFIER_BYTES, "Postgres' limit for a name")


def _name(name: object, where: str, limit: int, why: str) -> str:
    text = str(name)
    if not NAME.fullmatch(text):
        raise PipelineConfigError(f"{where}: {_NAME_RULE}")
    if len(text) > limit:
        raise PipelineConfigError(f"{where}: the name is {len(text)} bytes; at most {limit}: {why}")
    return text


def column(value: object) -> bool:
    """A column name Postgres keeps as written."""
    return isinstance(value, str) and bool(COLUMN.fullmatch(value)) and len(value) <= IDENTIFIER_BYTES


def topic(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and bool(TOPIC.fullmatch(value))


def table(
    value: object,
    key: str,
    where: str,
    *,
    table_bytes: int = IDENTIFIER_BYTES,
    others: tuple[str, ...] = (),
    shape: str = "schema.table",  # what the sink calls the two parts (Iceberg: namespace.name)
) -> str:
    """`value` as schema.table a declaration may write: lower case, each part within Postgres' limit
    (the table part within `table_bytes`, when eosflow names things after it), and not in a schema
    someone else keeps (owned_schema), unless its owner is one of `others`. The one check every sink's
    table and every publisher's outbox go through; a PipelineConfigError says what is wrong."""
    if not isinstance(value, str) or not TABLE.fullmatch(value):
        raise PipelineConfigError(
            f"{where}: {key} {value!r} must be {shape} in lower case (letters, digits and _)"
        )
    schema, name = value.split(".")
    for part, limit in ((schema, IDENTIFIER_BYTES), (name, table_bytes)):
        if len(part) > limit:
            why = (
                "Postgres keeps 63 bytes of a name and cuts the rest, so two longer names would be one table"
                if limit == IDENTIFIER_BYTES
                else f"eosflow names an index <table>{_TARGET_SUFFIX} after it, within Postgres' 63"
            )
            raise PipelineConfigError(
                f"{where}: {key} {value!r}: {part!r} is {len(part)} bytes; at most {limit}: {why}"
            )
    owner = owned_schema(schema)
    if owner is not None and owner not in others:
        raise PipelineConfigError(
            f"{where}: {key} {value!r} is in schema {schema!r}, which is {_OWNERS[owner]}; "
            "a declaration may not write there: use a schema of its own, e.g. raw.<table>"
        )
    return value
