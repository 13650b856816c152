"""An Iceberg sink's tables in their catalog, and the positions they hold.

Which catalog, and its properties: config.py (any catalog PyIceberg supports; the SQL catalog in the
warehouse when nothing is configured). Files go through the table's own FileIO: storage.py.

A table's positions are its own properties, `eosflow.position.<topic>[<partition>]`, set in the same
Iceberg commit as the data files they account for: table metadata, so they survive snapshot expiry
and compaction, which keep the current properties. Each holds the next offset, the last commit's batch
and counts, and how many replays committed with the last one's batch and counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from eosflow.errors import PipelineConfigError
from eosflow.ledger.mirror import SinkCommitted, SinkReplayed
from eosflow.settings import Settings
from eosflow.sinks.iceberg.config import CatalogConfig
from eosflow.sinks.iceberg.reach import reaching

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from eosflow.schema.evolution import Refusal

Key = tuple[str, int]
POSITION = "eosflow.position."
_POSITION_KEY = re.compile(r"^eosflow\.position\.(.+)\[(\d+)\]$")
# The catalog's compare-and-swap is the fence: a run whose table changed since it loaded it must fail,
# not retry onto the newer metadata (PyIceberg retries 4 times by default).
NO_RETRIES = {"commit.retry.num-retries": "0"}
DAY_PARTITION = "kafka_day"


def catalog(settings: Settings) -> Catalog:
    """The configured catalog, reached (an unreachable or refused one raises reach's errors, no secret)."""
    config = CatalogConfig.of(settings)
    with reaching(config, "opening the Iceberg catalog"):
        return config.load()


def load(settings: Settings, name: str) -> Table:
    """A table of the configured catalog, loaded (reach's errors when the catalog fails to answer)."""
    config = CatalogConfig.of(settings)
    with reaching(config, f"loading Iceberg table {name}"):
        return config.load().load_table(name)


def ensure_table(
    cat: Catalog,
    name: str,
    columns: list[tuple[str, pa.DataType]],
    log,
    key: tuple[str, ...] = (),
    renamed: Mapping[str, str] | None = None,
) -> Table:
    """The table, made from the declaration (partitioned by day of the Kafka timestamp), or evolved to it by
    the declaration's rules (_evolve; renamed: {new column: old} from the ledger's declarations); a table
    another writer changed so that eosflow's files no longer fit (a Kafka coordinate gone or made optional,
    the partition spec) is refused.

    With a primary `key`, a change stream's state table (state.py): unpartitioned (its rows are keys, not
    days; eosflow appends its rows through PyIceberg, so any spec another writer sets fits), the key's
    columns required and the table's identifier fields."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform

    namespace = name.split(".")[0]
    cat.create_namespace_if_not_exists(namespace)
    wanted = arrow_schema(columns, key)
    try:
        table = cat.load_table(name)
    except NoSuchTableError:
        from pyiceberg.io.pyarrow import pyarrow_to_schema
        from pyiceberg.schema import Schema
        from pyiceberg.table.name_mapping import MappedField, NameMapping

        # field_id: pydantic takes the name as well as its alias field-id; mypy knows only the alias
        mapping = NameMapping([MappedField(field_id=i + 1, names=[f.name]) for i, f in enumerate(wanted)])  # type: ignore[call-arg]
        schema = pyarrow_to_schema(wanted, name_mapping=mapping)
        if key:
            ids = [schema.find_field(k).field_id for k in key]
            schema = Schema(*schema.fields, identifier_field_ids=ids)
            table = cat.create_table(name, schema, properties=NO_RETRIES)
            log(f"created Iceberg state table {name} at {table.location()}, identified by {', '.join(key)}")
            return table
        source_id = schema.find_field("kafka_timestamp").field_id
        spec = PartitionSpec(
            PartitionField(source_id=source_id, field_id=1000, transform=DayTransform(), name=DAY_PARTITION)
        )
        table = cat.create_table(name, schema, partition_spec=spec, properties=NO_RETRIES)
        log(f"created Iceberg table {name} at {table.location()}, partitioned by day of kafka_timestamp")
        return table
    _refuse_incompatible(table, state=bool(key))
    _evolve(table, wanted, log, renamed=renamed)
    if table.properties.get("commit.retry.num-retries") != "0":
        with table.transaction() as tx:
            tx.set_properties(NO_RETRIES)
        log(f"{name}: set commit.retry.num-retries to 0 (a retried commit would not be fenced)")
        table = cat.load_table(name)
    return table


def _refuse_incompatible(table: Table, state: bool = False) -> None:
    """Before anything is written: the table still takes the files eosflow writes (required coordinates,
    one file per day of kafka_timestamp, as add_files needs; a state table: any spec), else a refusal naming
    what changed."""
    from pyiceberg.transforms import DayTransform

    name = ".".join(table.name())
    problems = []
    fields = {f.name: f for f in table.schema().fields}
    for column in sorted(_REQUIRED):
        if column not in fields:
            problems.append(f"column {column} is gone")
        elif not fields[column].required:
            problems.append(f"column {column} was made optional")
    spec = table.spec()
    ours = [
        f
        for f in spec.fields
        if isinstance(f.transform, DayTransform)
        and table.schema().find_column_name(f.source_id) == "kafka_timestamp"
    ]
    if not state and (len(spec.fields) != 1 or not ours):
        problems.append(f"its partition spec is {spec} (eosflow writes one file per day(kafka_timestamp))")
    if problems:
        raise PipelineConfigError(
            f"Iceberg table {name} was changed by another writer: {'; '.join(problems)}. eosflow's files no "
            "longer fit it, so nothing was written. Restore what changed (ALTER TABLE in the engine that "
            "changed it), or point the pipeline at a new table and backfill it"
        )


_REQUIRED = frozenset({"kafka_topic", "kafka_partition", "kafka_offset", "batch_id"})


def arrow_schema(columns: list[tuple[str, pa.DataType]], key: tuple[str, ...] = ()) -> pa.Schema:
    """The table's columns as the data files carry them: the Kafka coordinates and batch required (and a
    state table's primary key)."""
    required = _REQUIRED | set(key)
    return pa.schema([pa.field(n, t, nullable=n not in required) for n, t in columns])


def _evolve(table: Table, wanted: pa.Schema, log, renamed: Mapping[str, str] | None = None) -> None:
    """The table brought to the declaration by Iceberg's own schema evolution (docs/DESIGN.md,
    "Declarations that evolve"): a new optional column, a type promotion Iceberg allows, a column made
    optional; a column no longer declared kept, NULL in eosflow's files from now on.
    Else refused. A change stream's state table alike, its key's columns too."""
    from eosflow.schema import evolution
    from eosflow.schema.evolution import Column, Kind

    name = ".".join(table.name())
    fields = table.schema().fields
    found = evolution.evolve(
        [Column(f.name, _spelling(_iceberg_type(f.type)), not f.nullable) for f in wanted],
        [Column(f.name, _spelling(f.field_type), f.required) for f in fields],
        widening=evolution.iceberg_promotes,
        renamed=renamed,
    )
    if found.refusals:
        raise PipelineConfigError(
            f"Iceberg table {name}: "
            + "; ".join(f"{r} ({_remedy(name, r)})" for r in found.refusals)
            + ". Or point the pipeline at a new table and backfill it"
        )
    types = {f.name: _iceberg_type(f.type) for f in wanted}
    required = {f.name for f in fields if f.required}
    applied = [c for c in found.changes if c.kind != Kind.RETIRE or c.column in required]
    if applied:
        with table.update_schema() as update:
            for change in applied:
                if change.kind == Kind.ADD:
                    update.add_column(change.column, types[change.column])
                elif change.kind == Kind.WIDEN:
                    update.update_column(change.column, field_type=types[change.column])
                else:  # RELAX, or a required column no longer declared
                    update.make_column_optional(change.column)
    for change in found.changes:
        log(f"{name}: {change}")


def _spelling(iceberg_type) -> str:
    """An Iceberg type in the declaration's spelling where the rules tell types apart (its own otherwise:
    text, uuid and jsonb are all strings to Iceberg, and a change among them changes no file; so is an
    array, written as its Postgres literal)."""
    from pyiceberg.types import DecimalType, DoubleType, IntegerType, LongType

    if isinstance(iceberg_type, DecimalType):
        return f"numeric({iceberg_type.precision},{iceberg_type.scale})"
    if isinstance(iceberg_type, IntegerType):
        return "integer"
    if isinstance(iceberg_type, LongType):
        return "bigint"
    return "double" if isinstance(iceberg_type, DoubleType) else str(iceberg_type)


def _remedy(table: str, refusal: Refusal) -> str:
    """What makes the table fit, in Iceberg's terms (it cannot narrow: only a new table does)."""
    from eosflow.schema.evolution import Problem

    if refusal.problem == Problem.TYPE:
        return "Iceberg promotes only int to long and a decimal to more precision at the same scale"
    if refusal.problem == Problem.RENAMED:
        return (
            f"rename it in an engine, e.g. Spark's `ALTER TABLE {table} RENAME COLUMN {refusal.have} TO "
            f"{refusal.column}`, which keeps every row's value"
        )
    return "declare it optional"


def _iceberg_type(arrow_type: pa.DataType):
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.table.name_mapping import MappedField, NameMapping

    schema = pyarrow_to_schema(
        pa.schema([pa.field("x", arrow_type)]),
        name_mapping=NameMapping([MappedField(field_id=1, names=["x"])]),  # type: ignore[call-arg]  # as above
    )
    return schema.find_field("x").field_type


def position_bodies(table: Table) -> dict[Key, dict]:
    """The table's position properties as they are stored, per (topic, partition)."""
    found = {}
    for key, value in table.properties.items():
        m = _POSITION_KEY.match(key)
        if m:
            found[(m.group(1), int(m.group(2)))] = json.loads(value)
    return found


def positions(table: Table) -> dict[Key, SinkCommitted]:
    """What the table's commits say they committed, per (topic, partition): the last commit's batch and
    counts, and how many replays committed (with the last one's batch and counts)."""
    found = {}
    for key, body in position_bodies(table).items():
        replay = body.get("replay")
        found[key] = SinkCommitted(
            body["next"],
            body.get("batch"),
            body.get("read", 0),
            body.get("written", 0),
            body.get("rejected", 0),
            body.get("replays", 0),
            None
            if replay is None
            else SinkReplayed(replay["batch"], replay["read"], replay["written"], replay["rejected"]),
        )
    return found


def rejected_files(table: Table, kind: str = "data") -> dict[Key, list[str]]:
    """The rejected rows' files each partition's last commit (kind "data") or last replay (kind
    "replay") names: what a ledger mirror after a crash copies into eosflow.rejected."""
    found = {}
    for key, body in position_bodies(table).items():
        found[key] = (body if kind == "data" else body.get("replay") or {}).get("rejected_files", [])
    return found


def committed_body(body: dict | None, committed: SinkCommitted, rejected_files: list[str]) -> dict:
    """A partition's stored position after a commit: the commit's end, batch and counts; replays kept."""
    return {
        **(body or {}),
        "next": committed.offset,
        "batch": committed.batch_id,
        "read": committed.read,
        "written": committed.written,
        "rejected": committed.rejected,
        "rejected_files": rejected_files,
    }


def replayed_body(body: dict, replay: SinkReplayed, rejected_files: list[str]) -> dict:
    """A partition's stored position after a replay: the position stays, one more replay, this one last."""
    last = {
        "batch": replay.batch_id,
        "read": replay.read,
        "written": replay.written,
        "rejected": replay.rejected,
        "rejected_files": rejected_files,
    }
    return {**body, "replays": body.get("replays", 0) + 1, "replay": last}


def position_property(key: Key, body: dict) -> dict[str, str]:
    return {f"{POSITION}{key[0]}[{key[1]}]": json.dumps(body, separators=(",", ":"))}
