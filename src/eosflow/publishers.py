"""Publishers declared in the pipelines file, under `publishers:` beside `pipelines:`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eosflow import names
from eosflow.pipelines import PipelineConfigError, pipelines_file, read_file
from eosflow.settings import Settings

# Every key a publisher's entry may have (docs/reference/pipelines.md lists them).
_PUBLISHER_KEYS = frozenset(
    {"table", "topic", "id", "key", "batch_rows", "batch_seconds", "delivery", "dead_letter_topic", "format"}
)


@dataclass(frozen=True)
class Publisher:
    name: str
    table: str  # schema.table: the outbox
    topic: str  # where its rows go
    id_column: str  # unique per row: the order among a transaction's rows, and the eosflow-row-id header
    key_column: str | None = None  # the record key (the aggregate id): per-key order holds
    batch_rows: int = 1_000  # a Kafka transaction closes after this many rows...
    batch_seconds: float = 5.0  # ...or when no more committed rows are there; polls this often when idle
    delivery: str = "exactly_once"  # at_least_once: the lab's comparison (position in Postgres, after)
    dead_letter_topic: str = ""  # rows JSON cannot carry, with the reason; "" means <topic>.rejected
    format: str = "json"  # json | avro | protobuf: the outbox's columns as a registered schema

    @property
    def rejected_topic(self) -> str:
        return self.dead_letter_topic or f"{self.topic}.rejected"

    @property
    def shard(self) -> int:
        return 0  # one shard per publisher for now: its rows in one ordered stream

    @property
    def offsets_topic(self) -> str:
        return f"eosflow.publish.offsets.{self.name}"


def load_publishers(settings: Settings, path: Path | None = None) -> dict[str, Publisher]:
    """Every publisher the pipelines file declares (none: an empty mapping)."""
    path = path or pipelines_file(settings)
    body = read_file(path)
    entries = body.get("publishers") or {}
    if not isinstance(entries, dict):
        raise PipelineConfigError(f"{path}: publishers must be a mapping of publisher names to settings")
    found = {name: _parse(str(name), spec, f"{path}: publisher {name!r}") for name, spec in entries.items()}
    topics: dict[str, str] = {}
    for name, p in found.items():
        if p.topic in topics:
            raise PipelineConfigError(
                f"{path}: publishers {topics[p.topic]!r} and {name!r} both write {p.topic}"
            )
        topics[p.topic] = name
    return found


def load_publisher(settings: Settings, name: str, path: Path | None = None) -> Publisher:
    found = load_publishers(settings, path)
    if name not in found:
        raise PipelineConfigError(
            f"unknown publisher {name!r}; {path or pipelines_file(settings)} declares under publishers: "
            f"{sorted(found)}"
        )
    return found[name]


def _parse(name: str, spec: object, where: str) -> Publisher:
    if not names.NAME.match(name):
        raise PipelineConfigError(
            f"{where}: names are lower-case letters, digits and _ , starting with a letter"
        )
    if not isinstance(spec, dict):
        raise PipelineConfigError(f"{where}: expected a mapping of settings")
    if unknown := set(spec) - _PUBLISHER_KEYS:
        raise PipelineConfigError(
            f"{where}: unknown setting(s) {sorted(unknown)}; known: {sorted(_PUBLISHER_KEYS)}"
        )
    table, topic, id_column = spec.get("table"), spec.get("topic"), spec.get("id")
    if not isinstance(table, str) or not names.TABLE.match(table):
        raise PipelineConfigError(f"{where}: table {table!r} must be schema.table in lower case")
    if not isinstance(topic, str) or not names.TOPIC.match(topic):
        raise PipelineConfigError(f"{where}: topic {topic!r} must be a Kafka topic name")
    dead_letter = spec.get("dead_letter_topic", f"{topic}.rejected")
    if not isinstance(dead_letter, str) or not names.TOPIC.match(dead_letter) or dead_letter == topic:
        raise PipelineConfigError(
            f"{where}: dead_letter_topic {dead_letter!r} must be a Kafka topic name other than topic"
        )
    for key in ("id", "key"):
        value = spec.get(key)
        if (key == "id" or value is not None) and (
            not isinstance(value, str) or not names.COLUMN.match(value)
        ):
            raise PipelineConfigError(
                f"{where}: {key} {value!r} must be a column name"
                + (
                    " (a unique column: the rows' order within a transaction and their header)"
                    if key == "id"
                    else ""
                )
            )
    rows, seconds = spec.get("batch_rows", 1_000), spec.get("batch_seconds", 5.0)
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
        raise PipelineConfigError(f"{where}: batch_rows must be a whole number >= 1, not {rows!r}")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
        raise PipelineConfigError(f"{where}: batch_seconds must be a number > 0, not {seconds!r}")
    delivery = spec.get("delivery", "exactly_once")
    if delivery not in ("exactly_once", "at_least_once"):
        raise PipelineConfigError(
            f"{where}: delivery {delivery!r} unknown; exactly_once, or at_least_once (for comparison only)"
        )
    fmt = spec.get("format", "json")
    if fmt not in ("json", "avro", "protobuf"):
        raise PipelineConfigError(f"{where}: format {fmt!r} unknown; json (default), avro or protobuf")
    return Publisher(
        name, table, topic, id_column, spec.get("key"), rows, float(seconds), delivery, dead_letter, fmt
    )
