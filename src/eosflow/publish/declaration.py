"""Publishers declared in the pipelines file, under `publishers:` beside `pipelines:`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eosflow import names
from eosflow.declaration_numbers import whole_number
from eosflow.delivery import Delivery
from eosflow.pipelines import PipelineConfigError, pipelines_file, read_file
from eosflow.publish.row_format import RowFormat
from eosflow.settings import Settings

# Every key a publisher's entry may have (docs/reference/pipelines.md lists them).
_PUBLISHER_KEYS = frozenset(
    {"table", "topic", "id", "key", "batch_rows", "batch_seconds", "delivery", "dead_letter_topic", "format"}
)

# Upper bounds (docs/reference/pipelines.md lists them).
MAX_BATCH_ROWS = 1_000_000
_ROWS_WHY = "the rows of one Kafka transaction, held in memory and sent before its timeout"
MAX_BATCH_SECONDS = 3_600


@dataclass(frozen=True)
class Publisher:
    name: str
    table: str  # schema.table: the outbox
    topic: str  # where its rows go
    id_column: str  # unique per row: the order among a transaction's rows, and the eosflow-row-id header
    key_column: str | None = None  # the record key (the aggregate id): per-key order holds
    batch_rows: int = 1_000  # a Kafka transaction closes after this many rows...
    batch_seconds: float = 5.0  # ...or when no more committed rows are there; polls this often when idle
    # at_least_once: the lab's comparison (its position stored in Postgres, after the batch)
    delivery: Delivery = Delivery.EXACTLY_ONCE
    dead_letter_topic: str = ""  # rows JSON cannot carry, with the reason; "" means <topic>.rejected
    format: RowFormat = RowFormat.JSON  # json | avro | protobuf: the outbox's columns as a registered schema

    @property
    def rejected_topic(self) -> str:
        return self.dead_letter_topic or f"{self.topic}.rejected"

    @property
    def shard(self) -> int:
        return 0  # one shard per publisher for now: its rows in one ordered stream

    @property
    def offsets_topic(self) -> str:
        return f"eosflow.publish.offsets.{self.name}"


def load_each_publisher(
    settings: Settings, path: Path | None = None
) -> tuple[dict[str, Publisher], dict[str, PipelineConfigError]]:
    """Every publisher the file declares that parses (none: an empty mapping), and for each one that
    does not, why, as pipelines.load_each does for pipelines: one bad publisher does not hide the others'
    DAGs. Of two publishers writing one topic, the later is refused. A fault of the file itself raises."""
    path = path or pipelines_file(settings)
    body = read_file(path)
    entries = body.get("publishers") or {}
    if not isinstance(entries, dict):
        raise PipelineConfigError(f"{path}: publishers must be a mapping of publisher names to settings")
    found: dict[str, Publisher] = {}
    refused: dict[str, PipelineConfigError] = {}
    topics: dict[str, str] = {}
    for name, spec in entries.items():
        try:
            publisher = _parse(name, spec, f"{path}: publisher {name!r}")
        except PipelineConfigError as exc:
            refused[str(name)] = exc
            continue
        if publisher.topic in topics:
            refused[publisher.name] = PipelineConfigError(
                f"{path}: publishers {topics[publisher.topic]!r} and {publisher.name!r} both write "
                f"{publisher.topic}; each publisher needs a topic of its own"
            )
            continue
        topics[publisher.topic] = publisher.name
        found[publisher.name] = publisher
    return found, refused


def load_publishers(settings: Settings, path: Path | None = None) -> dict[str, Publisher]:
    """Every publisher the pipelines file declares (none: an empty mapping), or the first refusal."""
    found, refused = load_each_publisher(settings, path)
    if refused:
        raise next(iter(refused.values()))
    return found


def load_publisher(settings: Settings, name: str, path: Path | None = None) -> Publisher:
    found = load_publishers(settings, path)
    if name not in found:
        raise PipelineConfigError(
            f"unknown publisher {name!r}; {path or pipelines_file(settings)} declares under publishers: "
            f"{sorted(found)}"
        )
    return found[name]


def _parse(raw_name: object, spec: object, where: str) -> Publisher:
    name = names.publisher_name(raw_name, where)
    if not isinstance(spec, dict):
        raise PipelineConfigError(f"{where}: expected a mapping of settings")
    if unknown := set(spec) - _PUBLISHER_KEYS:
        raise PipelineConfigError(
            f"{where}: unknown setting(s) {sorted(unknown)}; known: {sorted(_PUBLISHER_KEYS)}"
        )
    # Its first run adds a column and an index to the outbox: never to eosflow's tables or Postgres'
    # catalogs. A dbt mart is what a publisher is for (the demo publishes analytics.orders_published).
    table = names.table(spec.get("table"), "table", where, others=("dbt",))
    topic, id_column = names.output_topic(spec.get("topic"), "topic", where), spec.get("id")
    dead_letter = names.output_topic(
        spec.get("dead_letter_topic", f"{topic}.rejected"), "dead_letter_topic", where
    )
    if dead_letter == topic:
        raise PipelineConfigError(
            f"{where}: dead_letter_topic {dead_letter!r} must be a topic other than topic"
        )
    for key in ("id", "key"):
        value = spec.get(key)
        if (key == "id" or value is not None) and not names.column(value):
            raise PipelineConfigError(
                f"{where}: {key} {value!r} must be a column name (lower case, at most 63 bytes)"
                + (
                    " (a unique column: the rows' order within a transaction and their header)"
                    if key == "id"
                    else ""
                )
            )
    rows = whole_number(spec, "batch_rows", 1_000, where, high=MAX_BATCH_ROWS, why=_ROWS_WHY)
    seconds = spec.get("batch_seconds", 5.0)
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not 0 < seconds <= MAX_BATCH_SECONDS  # NaN fails this too
    ):
        raise PipelineConfigError(
            f"{where}: batch_seconds must be a number > 0 and <= {MAX_BATCH_SECONDS:,} (how often an idle "
            f"publisher looks for new rows: an hour is the longest it waits), not {seconds!r}"
        )
    delivery = spec.get("delivery", "exactly_once")
    if delivery not in (Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE):
        raise PipelineConfigError(
            f"{where}: delivery {delivery!r} unknown; exactly_once, or at_least_once (for comparison only)"
        )
    delivery = Delivery(delivery)  # parsed once: compared as a member from here on
    fmt = spec.get("format", "json")
    if fmt not in tuple(RowFormat):
        raise PipelineConfigError(f"{where}: format {fmt!r} unknown; json (default), avro or protobuf")
    fmt = RowFormat(fmt)  # parsed once: compared as a member from here on
    assert isinstance(id_column, str)  # names.column checked it above
    return Publisher(
        name, table, topic, id_column, spec.get("key"), rows, float(seconds), delivery, dead_letter, fmt
    )
