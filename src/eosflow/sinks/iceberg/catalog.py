"""Where an Iceberg sink's tables live, and the positions they hold.

The catalog is PyIceberg's SQL catalog, by default in the warehouse Postgres: its tables
(`iceberg_tables`, `iceberg_namespace_properties`) are the ones Iceberg's JDBC catalog uses, so Spark,
Trino or Flink find the same tables (the tests read them with PyIceberg only, so far). Data files go under
EOSFLOW_ICEBERG_WAREHOUSE (default `file://<state dir>/iceberg`; any filesystem pyarrow supports:
`s3://bucket/prefix`, `gs://...`).

A table's positions are its own properties, `eosflow.position.<topic>[<partition>]`, set in the same
Iceberg commit as the data files they account for: table metadata, so they survive snapshot expiry
and compaction, which keep the current properties. Each holds the next offset, the last commit's batch
and counts, and how many replays committed with the last one's batch and counts.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from eosflow.errors import PipelineConfigError
from eosflow.ledger.mirror import SinkCommitted, SinkReplayed
from eosflow.settings import Settings

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

Key = tuple[str, int]
POSITION = "eosflow.position."
_POSITION_KEY = re.compile(r"^eosflow\.position\.(.+)\[(\d+)\]$")
# The catalog's compare-and-swap is the fence: a run whose table changed since it loaded it must fail,
# not retry onto the newer metadata (PyIceberg retries 4 times by default).
NO_RETRIES = {"commit.retry.num-retries": "0"}
DAY_PARTITION = "kafka_day"


@dataclass(frozen=True)
class Where:
    """The catalog and the file location, from the environment (docs/reference/environment.md)."""

    name: str
    uri: str = field(repr=False)  # holds the warehouse password
    warehouse: str

    @classmethod
    def of(cls, settings: Settings) -> Where:
        return cls(
            os.environ.get("EOSFLOW_ICEBERG_CATALOG", "eosflow"),
            _checked_uri(os.environ.get("EOSFLOW_ICEBERG_CATALOG_URI") or _warehouse_uri(settings)),
            os.environ.get("EOSFLOW_ICEBERG_WAREHOUSE", (settings.state_dir / "iceberg").as_uri()),
        )


def _warehouse_uri(settings: Settings) -> str:
    """The warehouse as a SQLAlchemy URL, each part quoted: a password with `@ : / % #` stays itself."""
    from sqlalchemy.engine import URL

    url = URL.create(
        "postgresql+psycopg",
        username=settings.pg_user,
        password=settings.pg_password,
        host=settings.pg_host,
        port=settings.pg_port,
        database=settings.pg_database,
    )
    return url.render_as_string(hide_password=False)


def _checked_uri(uri: str) -> str:
    """The URI, parsed once here: SQLAlchemy's own parse error would quote a piece of the password."""
    from sqlalchemy.engine import make_url

    try:
        make_url(uri)
    except Exception:
        raise PipelineConfigError(
            "EOSFLOW_ICEBERG_CATALOG_URI is not a SQLAlchemy URL (not shown: it may hold a password). "
            "Write it as dialect+driver://user:password@host:port/database, with the user and password "
            "percent-encoded (urllib.parse.quote(password, safe=''))"
        ) from None
    return uri


def catalog(settings: Settings) -> SqlCatalog:
    from pyiceberg.catalog.sql import SqlCatalog

    where = Where.of(settings)
    return SqlCatalog(where.name, uri=where.uri, warehouse=where.warehouse)


def ensure_table(cat: SqlCatalog, name: str, columns: list[tuple[str, pa.DataType]], log) -> Table:
    """The table, made from the declaration (partitioned by day of the Kafka timestamp), or evolved:
    declared columns it lacks are added as optional ones; a column whose type changed is refused."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform

    namespace = name.split(".")[0]
    cat.create_namespace_if_not_exists(namespace)
    wanted = arrow_schema(columns)
    try:
        table = cat.load_table(name)
    except NoSuchTableError:
        from pyiceberg.io.pyarrow import pyarrow_to_schema
        from pyiceberg.table.name_mapping import MappedField, NameMapping

        mapping = NameMapping([MappedField(field_id=i + 1, names=[f.name]) for i, f in enumerate(wanted)])
        schema = pyarrow_to_schema(wanted, name_mapping=mapping)
        source_id = schema.find_field("kafka_timestamp").field_id
        spec = PartitionSpec(
            PartitionField(source_id=source_id, field_id=1000, transform=DayTransform(), name=DAY_PARTITION)
        )
        table = cat.create_table(name, schema, partition_spec=spec, properties=NO_RETRIES)
        log(f"created Iceberg table {name} at {table.location()}, partitioned by day of kafka_timestamp")
        return table
    _evolve(table, wanted, log)
    if table.properties.get("commit.retry.num-retries") != "0":
        with table.transaction() as tx:
            tx.set_properties(NO_RETRIES)
        log(f"{name}: set commit.retry.num-retries to 0 (a retried commit would not be fenced)")
        table = cat.load_table(name)
    return table


_REQUIRED = frozenset({"kafka_topic", "kafka_partition", "kafka_offset", "batch_id"})


def arrow_schema(columns: list[tuple[str, pa.DataType]]) -> pa.Schema:
    """The table's columns as the data files carry them: the Kafka coordinates and batch required."""
    return pa.schema([pa.field(n, t, nullable=n not in _REQUIRED) for n, t in columns])


def _evolve(table: Table, wanted: pa.Schema, log) -> None:
    have = {f.name: f.field_type for f in table.schema().fields}
    name = ".".join(table.name())
    changed = [
        f"{f.name} is {have[f.name]}, declared {_iceberg_type(f.type)}"
        for f in wanted
        if f.name in have and have[f.name] != _iceberg_type(f.type)
    ]
    if changed:
        raise PipelineConfigError(
            f"Iceberg table {name}: {'; '.join(changed)}. A column's type cannot change in place: "
            "declare a new column (or a new table), or keep the type"
        )
    missing = [f for f in wanted if f.name not in have]
    if missing:
        with table.update_schema() as update:
            for f in missing:
                update.add_column(f.name, _iceberg_type(f.type))
        log(f"{name}: added optional column(s) {', '.join(f.name for f in missing)}")


def _iceberg_type(arrow_type: pa.DataType):
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.table.name_mapping import MappedField, NameMapping

    schema = pyarrow_to_schema(
        pa.schema([pa.field("x", arrow_type)]),
        name_mapping=NameMapping([MappedField(field_id=1, names=["x"])]),
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
