"""Pipelines declared in one YAML file (pipelines.yml, or $EOSFLOW_PIPELINES)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path

import yaml

from eosflow import names
from eosflow.databases import declaration as databases
from eosflow.declaration_numbers import whole_number
from eosflow.delivery import Delivery
from eosflow.errors import PipelineConfigError
from eosflow.schema.declaration import DeclarationError, RecordSchema, parse_schema
from eosflow.settings import Settings
from eosflow.sinks import registry
from eosflow.sinks.protocol import Sink
from eosflow.sources.kafka import lag_group

# The consumer's three semantics (docs/DESIGN.md, "Delivery modes"), as text: the lab names its runs and
# writes its pipelines files (YAML, which has no form for an enum member) with them.
DELIVERY_MODES: tuple[str, ...] = tuple(mode.value for mode in Delivery)


class PipelineMode(StrEnum):
    """How a pipeline runs (`mode:`), parsed once where it is declared."""

    BATCH = "batch"  # the ingest DAG on its interval
    STREAM = "stream"  # `eosflow stream` as a service; the DAG runs when triggered


MODES: tuple[PipelineMode, ...] = tuple(PipelineMode)

# Upper bounds of the numbers a declaration takes (docs/reference/pipelines.md lists them).
MAX_RECORDS_PER_PARTITION = 1_000_000_000
MAX_VALUE_BYTES = 1 << 30  # 1 GiB, Postgres' largest field
MAX_OFFSET = (1 << 63) - 1  # Kafka's offsets are 64-bit signed
_RECORDS_WHY = "one Spark task reads at most this many offsets of a partition per run; more is better split"
_VALUE_WHY = "a value is stored whole, and Postgres stores no field larger than 1 GiB"


@dataclass(frozen=True)
class InitialOffset:
    kind: str  # earliest | latest | timestamp | offset
    value: int | None = None  # epoch milliseconds for timestamp, the offset for offset

    @classmethod
    def parse(cls, raw: str, where: str) -> InitialOffset:
        text = str(raw).strip()
        if text in ("earliest", "latest"):
            return cls(text)
        kind, _, arg = text.partition(":")
        try:
            if kind == "offset" and 0 <= int(arg) <= MAX_OFFSET:
                return cls("offset", int(arg))
            if kind == "timestamp":
                stamp = datetime.fromisoformat(arg.replace("Z", "+00:00"))
                if stamp.tzinfo is None:
                    raise ValueError("no time zone")
                millis = int(stamp.timestamp() * 1000)
                if millis >= 0:  # Kafka reads -1 and -2 as latest and earliest, not as instants
                    return cls("timestamp", millis)
        except ValueError:
            pass
        raise PipelineConfigError(
            f"{where}: initial_offset {raw!r} is not one of earliest, latest, "
            "timestamp:<ISO-8601 with zone, from 1970, e.g. 2026-01-01T00:00:00Z>, "
            "offset:<n> (0 <= n < 2^63, a Kafka offset)"
        )


@dataclass(frozen=True)
class Pipeline:
    name: str
    topics: tuple[str, ...]
    schema: RecordSchema
    transform_version: str
    initial_offset: InitialOffset
    max_records_per_partition: int
    max_value_bytes: int
    sink: Sink  # where the records land (eosflow.sinks.protocol), with its declaration keys
    delivery: Delivery = Delivery.EXACTLY_ONCE
    # Records arriving in the topics also wake the ingest DAG (an Airflow AssetWatcher); only a wake-up:
    # positions still come from the ledger. Opt-in: each wake-up costs a run (a Spark start).
    wake_on_records: bool = False
    # batch: the ingest DAG runs on its interval. stream: `eosflow stream` runs it (a service); the ingest
    # DAG runs only when triggered, and eosflow_health checks the stream keeps up.
    mode: PipelineMode = PipelineMode.BATCH
    # The Kafka consumer group each commit reports the new positions to, so Kafka's tools show the lag
    # (sources/kafka/lag_group.py); None: no report (`consumer_group: false`, or a sink whose own group
    # holds its positions). Never read back.
    consumer_group: str | None = None

    @property
    def topic(self) -> str:
        return self.topics[0]

    @property
    def target_table(self) -> str:
        """The warehouse table holding the output; "" when the sink keeps none."""
        return self.sink.table or ""


def pipelines_file(settings: Settings) -> Path:
    """The settings' own (Airflow's Variable eosflow_pipelines), else EOSFLOW_PIPELINES, else the root's."""
    return settings.pipelines_path or Path(
        os.environ.get("EOSFLOW_PIPELINES") or settings.root / "pipelines.yml"
    )


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key written twice in one mapping is refused: YAML keeps the last one
    silently, and two pipelines (or publishers, or settings) of one name would be one, unnoticed."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: what it merges may be overridden, that is its point
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line)
            except TypeError:
                continue  # an unhashable key: the safe loader refuses it itself
            if first != key_node.start_mark.line:
                raise _DuplicateKey(key, first + 1, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, first: int, again: int) -> None:
        super().__init__(
            f"{key!r} is declared twice, on lines {first} and {again}: YAML would keep only the last; "
            "give each pipeline, publisher and setting one entry"
        )


def read_file(path: Path) -> dict:
    """The pipelines file's top level (pipelines:, publishers:), or a PipelineConfigError saying why not.
    Every reader of the file goes through here, so a name declared twice is refused for all of them."""
    try:
        body = yaml.load(path.read_text(), Loader=_Loader) or {}  # noqa: S506 (a SafeLoader)
    except FileNotFoundError:
        raise PipelineConfigError(
            f"no pipelines file at {path}; create one, or point EOSFLOW_PIPELINES at yours (in Airflow: the "
            "Variable eosflow_pipelines)"
        ) from None
    except _DuplicateKey as exc:
        raise PipelineConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise PipelineConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(body, dict):
        raise PipelineConfigError(f"{path}: expected a mapping with pipelines: (and publishers:)")
    return body


def load_each(
    settings: Settings, path: Path | None = None
) -> tuple[dict[str, Pipeline], dict[str, PipelineConfigError]]:
    """Every pipeline the file declares that parses, and for each one that does not, why: one bad
    pipeline does not hide the others (the DAG file still makes theirs). Of two pipelines writing one
    output, the later in the file is refused and the first kept. What is wrong with the file itself
    (missing, not YAML, a name declared twice, no pipelines: mapping) raises PipelineConfigError."""
    path = path or pipelines_file(settings)
    entries = read_file(path).get("pipelines")
    if not isinstance(entries, dict) or not entries:
        raise PipelineConfigError(
            f"{path}: expected a top-level 'pipelines:' mapping with at least one pipeline"
        )
    found: dict[str, Pipeline] = {}
    refused: dict[str, PipelineConfigError] = {}
    writers: dict[str, str] = {}
    groups: dict[str, str] = {}  # consumer group -> the pipeline that reports to it
    for name, spec in entries.items():
        if databases.is_database(spec):
            continue  # its tables are its members (load_databases, member)
        try:
            pipeline = _parse(name, spec, f"{path}: pipeline {name!r}")
        except PipelineConfigError as exc:
            refused[str(name)] = exc
            continue
        output = pipeline.sink.output
        if output in writers:
            refused[pipeline.name] = PipelineConfigError(
                f"{path}: pipelines {writers[output]!r} and {pipeline.name!r} both write {output}; each "
                "pipeline needs an output of its own (the ledger and the checks are per pipeline)"
            )
            continue
        if pipeline.consumer_group in groups:
            refused[pipeline.name] = PipelineConfigError(
                f"{path}: pipelines {groups[pipeline.consumer_group]!r} and {pipeline.name!r} both report to "
                f"consumer group {pipeline.consumer_group!r}; each pipeline's lag needs a group of its own: "
                "name another, or leave consumer_group out"
            )
            continue
        writers[output] = pipeline.name
        if pipeline.consumer_group is not None:
            groups[pipeline.consumer_group] = pipeline.name
        found[pipeline.name] = pipeline
    return found, refused


def load_all(settings: Settings, path: Path | None = None) -> dict[str, Pipeline]:
    """Every pipeline the file declares, or the first refusal (in the file's order)."""
    found, refused = load_each(settings, path)
    if refused:
        raise next(iter(refused.values()))
    return found


def load(settings: Settings, name: str, path: Path | None = None) -> Pipeline:
    """Pipeline `name`, or why it is refused: another pipeline's error does not stop it (a task of its
    DAG, or `eosflow ingest --pipeline`, runs while a sibling waits for a fix). A name the file does not
    declare may be a database entry's member, as discovery recorded it in the warehouse."""
    found, refused = load_each(settings, path)
    if name in refused:
        raise refused[name]
    if name in found:
        return found[name]
    entries, refused_entries = load_databases(settings, path)
    if name in entries or name in refused_entries:
        if name in refused_entries:
            raise refused_entries[name]
        raise PipelineConfigError(
            f"{name!r} is a database entry: each of its tables is a pipeline of its own (`eosflow discover "
            f"--pipeline {name}` lists them); `eosflow ingest --pipeline {name}` runs them all"
        )
    for database in entries.values():
        if name.startswith(f"{database.name}__") or database.names_member(name):
            pipeline = member(settings, database, name)
            if pipeline is not None:
                return pipeline
    also = f" (refused: {', '.join(sorted(refused))})" if refused else ""
    raise PipelineConfigError(
        f"unknown pipeline {name!r}; {path or pipelines_file(settings)} declares: "
        f"{', '.join(sorted(found) + sorted(entries))}{also}"
    )


def load_databases(
    settings: Settings, path: Path | None = None
) -> tuple[dict[str, databases.Database], dict[str, PipelineConfigError]]:
    """The file's `database:` entries that parse, and why each other one does not."""
    path = path or pipelines_file(settings)
    entries = read_file(path).get("pipelines")
    found: dict[str, databases.Database] = {}
    refused: dict[str, PipelineConfigError] = {}
    for name, spec in (entries if isinstance(entries, dict) else {}).items():
        if not databases.is_database(spec):
            continue
        try:
            found[str(name)] = databases.parse(name, spec, f"{path}: pipeline {name!r}")
        except PipelineConfigError as exc:
            refused[str(name)] = exc
    return found, refused


def members(settings: Settings, database: databases.Database) -> dict[str, Pipeline]:
    """Every member of `database` discovery recorded that parses (a refused one, a conflict among them,
    is left out: its own runs say why), by name."""
    import psycopg

    from eosflow.databases import store

    with psycopg.connect(settings.warehouse_dsn) as conn:
        try:
            held = store.members(conn, database.name)
        except psycopg.errors.UndefinedTable:
            return {}
    found = {}
    for m in held:
        if m.shape.conflict:
            continue
        spec = database.member_spec(m.source_schema, m.source_table, m.topic, m.shape)
        try:
            parsed = _parse(m.member, spec, f"member {m.member!r} of {database.name!r}")
            found[m.member] = _as_member(parsed, m.shape.fields)
        except PipelineConfigError:
            continue
    return found


def member(settings: Settings, database: databases.Database, name: str) -> Pipeline | None:
    """Member `name` of `database` as discovery recorded it (None: no such member), parsed as any
    pipeline is; refused while its table's records differ from its recorded shape (a conflict)."""
    import psycopg

    from eosflow.databases import store

    with psycopg.connect(settings.warehouse_dsn) as conn:
        try:
            held = store.member(conn, database.name, name)
        except psycopg.errors.UndefinedTable:
            return None  # no warehouse migrated yet: no member discovered either
    if held is None:
        return None
    where = f"member {name!r} of database entry {database.name!r} ({held.topic})"
    if held.shape.conflict:
        raise PipelineConfigError(
            f"{where}: its table changed in a way eosflow does not apply: {held.shape.conflict}. Its runs "
            "stop until a person decides; declare the table as a pipeline of its own to take the new shape"
        )
    spec = database.member_spec(held.source_schema, held.source_table, held.topic, held.shape)
    return _as_member(_parse(name, spec, where), held.shape.fields)


def _as_member(pipeline: Pipeline, fields: frozenset[str]) -> Pipeline:
    """A member's pipeline refuses an image field its discovery has not seen (DESIGN: `not declared yet`)."""
    return dataclasses.replace(pipeline, schema=dataclasses.replace(pipeline.schema, image_fields=fields))


# The settings that describe a pipeline's records (eosflow.schema.declaration), as opposed to where
# they come from and go.
SCHEMA_SETTINGS = ("format", "key", "key_format", "columns", "business_key", "transform", "text_pattern")


def declaration(path: Path, name: str) -> dict:
    """Pipeline `name`'s record settings in `path`, as written: for tools that declare a pipeline like
    another one (the lab and the bench run the project's own orders declaration on topics of their own)."""
    spec = (read_file(path).get("pipelines") or {}).get(name)
    if not isinstance(spec, dict):
        raise PipelineConfigError(f"{path}: no pipeline {name!r} to copy the declaration of")
    return {k: spec[k] for k in SCHEMA_SETTINGS if k in spec}


def _transform_version(raw: object, where: str) -> str:
    """Stamped on every output row: printable text only (a NUL would fail every COPY of the pipeline)."""
    text = str(raw)
    if not text or len(text) > 100 or not text.isprintable():
        raise PipelineConfigError(
            f"{where}: transform_version {raw!r} must be 1 to 100 printable characters, e.g. v2"
        )
    return text


# Every pipeline's keys; a sink declares its own (Sink.keys).
_PIPELINE_KEYS = frozenset(
    {
        "topics",
        "format",
        "text_pattern",
        "key",
        "key_format",
        "columns",
        "business_key",
        "transform",
        "transform_version",
        "initial_offset",
        "max_records_per_partition",
        "max_value_bytes",
        "delivery",
        "sink",
        "wake_on_records",
        "mode",
        "changes",
        "primary_key",
        "consumer_group",
    }
)


def _sink_class(spec: dict, where: str) -> type[Sink]:
    """The declared sink's class, after refusing keys no sink knows or another sink's keys."""
    kind = spec.get("sink", registry.DEFAULT)
    try:
        cls = registry.sink_class(str(kind))
    except PipelineConfigError as exc:
        raise PipelineConfigError(f"{where}: {exc}") from None
    if unknown := set(spec) - _PIPELINE_KEYS - cls.keys:
        others = {k: registry.sink_class(k).keys for k in registry.kinds() if k != cls.kind}
        for other, keys in sorted(others.items()):
            if misplaced := sorted(unknown & keys):
                raise PipelineConfigError(
                    f"{where}: {misplaced} only apply to sink: {other}, and this pipeline's sink is "
                    f"{cls.kind}: remove {', '.join(misplaced)}"
                )
        known = sorted(_PIPELINE_KEYS | cls.keys)
        raise PipelineConfigError(f"{where}: unknown setting(s) {sorted(unknown)}; known: {known}")
    return cls


def _parse(raw_name: object, spec: object, where: str) -> Pipeline:
    name = names.pipeline_name(raw_name, where)
    if not isinstance(spec, dict):
        raise PipelineConfigError(f"{where}: expected a mapping of settings")
    topics = spec.get("topics")
    if (
        not isinstance(topics, list)
        or not topics
        or not all(names.topic(t) for t in topics)
        or len(set(topics)) != len(topics)
    ):
        raise PipelineConfigError(
            f"{where}: topics must be a list of one or more distinct Kafka topic names (letters, digits, "
            "'.', '_', '-'; records of the same schema)"
        )
    sink_class = _sink_class(spec, where)
    try:
        schema = parse_schema(spec, where)
    except DeclarationError as exc:
        raise PipelineConfigError(str(exc)) from None

    delivery = spec.get("delivery", "exactly_once")
    if delivery not in DELIVERY_MODES:
        raise PipelineConfigError(f"{where}: delivery {delivery!r} unknown; one of {list(DELIVERY_MODES)}")
    delivery = Delivery(delivery)  # parsed once: compared as a member from here on
    if schema.changes is not None and not sink_class.keeps_state:
        raise PipelineConfigError(
            f"{where}: sink: {sink_class.kind} does not keep a change stream's state table yet (changes: "
            f"{schema.changes}); use the warehouse sink (state_table:), or drop changes to append the records"
        )
    if schema.changes is not None and delivery not in sink_class.state_deliveries:
        raise PipelineConfigError(
            f"{where}: sink: {sink_class.kind} keeps a change stream's state with delivery: exactly_once "
            f"only (its changes and its positions commit together); drop delivery {delivery}"
        )
    sink = sink_class.declare(spec, schema, where)

    wake = spec.get("wake_on_records", False)
    if not isinstance(wake, bool):
        raise PipelineConfigError(
            f"{where}: wake_on_records {wake!r} must be true or false (unquoted): true also runs the "
            "ingest DAG when records arrive in its topics, false (the default) runs it on its interval only"
        )

    mode = spec.get("mode", "batch")
    if mode not in MODES:
        raise PipelineConfigError(
            f"{where}: mode {mode!r} must be one of {[m.value for m in MODES]}: batch (the ingest DAG on its "
            "interval) or stream (`eosflow stream` as a service; the DAG runs when triggered)"
        )
    mode = PipelineMode(mode)  # parsed once: compared as a member from here on
    if mode == PipelineMode.STREAM and wake:
        raise PipelineConfigError(
            f"{where}: wake_on_records wakes a batch pipeline's DAG; a stream already reads records as they "
            "arrive: leave wake_on_records out, or make the pipeline mode: batch"
        )

    if sink_class.commits_consumer_group:
        if "consumer_group" in spec:
            raise PipelineConfigError(
                f"{where}: sink: {sink_class.kind} keeps its positions in consumer group "
                f"{lag_group.default(name)!r}, committed in its transactions, and Kafka's tools show its "
                "lag from there: remove consumer_group"
            )
        group = None
    else:
        group = lag_group.declared(spec.get("consumer_group"), name, where)

    return Pipeline(
        name=name,
        topics=tuple(topics),
        schema=schema,
        sink=sink,
        transform_version=_transform_version(spec.get("transform_version", "v1"), where),
        initial_offset=InitialOffset.parse(spec.get("initial_offset", "earliest"), where),
        max_records_per_partition=whole_number(
            spec,
            "max_records_per_partition",
            500_000,
            where,
            high=MAX_RECORDS_PER_PARTITION,
            why=_RECORDS_WHY,
        ),
        max_value_bytes=whole_number(
            spec, "max_value_bytes", 65_536, where, high=MAX_VALUE_BYTES, why=_VALUE_WHY
        ),
        delivery=delivery,
        wake_on_records=wake,
        mode=mode,
        consumer_group=group,
    )
