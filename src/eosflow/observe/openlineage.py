"""A run as OpenLineage events (docs/DESIGN.md, Orchestration: "OpenLineage"), built on the openlineage-python
client's event, facet and naming classes, so what catalogs read (Marquez, DataHub, OpenMetadata, Atlan) is
the spec's own shape.

`events` builds them; `Emitter` sends them through the client, only when the client is configured (the
stand-alone CLI's case: Airflow's runs report through Airflow's OpenLineage provider instead). A send that
fails is a warning in the run's log: lineage reports a run, it never fails one.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from eosflow.pipelines import Pipeline
    from eosflow.publish.declaration import Publisher
    from eosflow.publish.run import PublishSummary
    from eosflow.runners.summary import RunSummary
    from eosflow.settings import Settings

NAMESPACE_ENV = "OPENLINEAGE_NAMESPACE"
DEFAULT_NAMESPACE = "eosflow"
FACET_SCHEMA = Path(__file__).with_name("EosflowRunFacet.json")
FACET_SCHEMA_URL = "urn:eosflow:openlineage:1-1-0:EosflowRunFacet#/$defs/EosflowRunFacet"  # the file's $id
PUBLISH_FACET_SCHEMA = Path(__file__).with_name("EosflowPublishRunFacet.json")
PUBLISH_FACET_SCHEMA_URL = (
    "urn:eosflow:openlineage:1-0-0:EosflowPublishRunFacet#/$defs/EosflowPublishRunFacet"  # the file's $id
)


def producer() -> str:
    """The `producer` of every event and facet: this version of eosflow, as PyPI names it."""
    try:
        version = metadata.version("eosflow")
    except metadata.PackageNotFoundError:  # a checkout run without installing
        version = "unknown"
    return f"https://pypi.org/project/eosflow/{version}/"


@dataclass(frozen=True)
class Named:
    """A dataset in OpenLineage's naming."""

    namespace: str
    name: str


def kafka_topic(settings: Settings, topic: str) -> Named:
    from openlineage.client.naming.dataset import Kafka

    host, _, port = settings.bootstrap_servers.split(",")[0].strip().rpartition(":")
    naming = Kafka(bootstrap_server_host=host, port=port, topic=topic)
    return Named(naming.get_namespace(), naming.get_name())


def from_uri(uri: str) -> Named:
    """An output's lineage URI (Sink.lineage_outputs) in OpenLineage's naming: postgres://host:port/database/
    schema/table, kafka://server/topic, a location in storage as OpenLineage names storage (an Iceberg
    table's: s3://bucket/key, gs://bucket/key, file:///path, hdfs://host:port/path), anything else by its
    authority and path."""
    parts = urlsplit(uri)
    path = [p for p in parts.path.split("/") if p]
    if parts.scheme == "postgres" and len(path) == 3:
        return Named(f"postgres://{parts.netloc}", ".".join(path))
    if parts.scheme == "kafka" and len(path) == 1:
        return Named(f"kafka://{parts.netloc}", path[0])
    if parts.scheme in _BUCKETS:  # the bucket, then the object key
        return Named(f"{_BUCKETS[parts.scheme]}://{parts.netloc}", parts.path.lstrip("/"))
    if parts.scheme == "file":
        return Named("file", parts.path)
    if parts.scheme == "hdfs":
        return Named(f"hdfs://{parts.netloc}", parts.path)
    return Named(f"{parts.scheme}://{parts.netloc}", ".".join(path))


# Object stores by the scheme a location is written with, as OpenLineage names them (Hadoop's s3a and s3n
# are S3).
_BUCKETS = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}


def _column_facets(pipeline: Pipeline, inputs: list[Named]) -> dict[str, Any]:
    from openlineage.client.facet_v2 import column_lineage_dataset as lineage
    from openlineage.client.facet_v2 import schema_dataset as schema

    columns = pipeline.schema.columns
    fields = [schema.SchemaDatasetFacetFields(c.name, c.type.declared) for c in columns]
    sourced = [c for c in columns if c.source and not c.meta]  # a field of the record, not its metadata
    by_column = {
        c.name: lineage.Fields(
            # the field's path in the record, as OpenLineage names nested fields ("total.amount")
            inputFields=[
                lineage.InputField(i.namespace, i.name, c.source.removeprefix("$.")) for i in inputs
            ],
            transformationType="IDENTITY",
            transformationDescription="the declared column's value from its source field, checked",
        )
        for c in sourced
    }
    facets: dict[str, Any] = {"schema": schema.SchemaDatasetFacet(fields=fields, producer=producer())}
    if by_column and pipeline.schema.transform is None:  # a transform makes every column: no field maps
        facets["columnLineage"] = lineage.ColumnLineageDatasetFacet(fields=by_column, producer=producer())
    return facets


def _eosflow_facet(summary: RunSummary) -> Any:
    import attr
    from openlineage.client.facet_v2 import RunFacet

    @attr.define
    class EosflowRunFacet(RunFacet):
        batchId: str  # noqa: N815 (the spec's camelCase)
        planKind: str  # noqa: N815
        outcome: str
        ranges: list[dict[str, Any]]

        @staticmethod
        def _get_schema() -> str:
            return FACET_SCHEMA_URL

    plan = summary.plan
    ranges = []
    for r in plan.ranges if plan is not None else []:
        c = summary.counts.get((r.topic, r.partition))
        ranges.append(
            {
                "topic": r.topic,
                "partition": r.partition,
                "start": r.start,
                "end": r.end,
                "read": c.read if c else 0,
                "written": c.written if c else 0,
                "rejected": c.rejected if c else 0,
            }
        )
    kind = plan.kind if plan is not None else "none"
    return EosflowRunFacet(summary.batch_id, kind, summary.outcome, ranges, producer=producer())


@dataclass
class RunLineage:
    """One run's START and its end, as OpenLineage events (the client's RunEvent; `as_json` for its JSON)."""

    settings: Settings
    pipeline: Pipeline
    job_kind: str  # ingest | backfill | stream
    run_id: str = ""

    def __post_init__(self) -> None:
        self.run_id = self.run_id or _uuid7()

    @property
    def job_name(self) -> str:
        return f"{self.pipeline.name}.{self.job_kind}"

    def start(self) -> Any:
        return self._event("START", {}, {})

    def complete(self, summary: RunSummary) -> Any:
        return self._event("COMPLETE", *self.completion(summary))

    def completion(self, summary: RunSummary) -> tuple[dict[str, Any], dict[str, Any]]:
        """The run's facets and the output's once it ended: eosflow's facet, and the rows written."""
        from openlineage.client.facet_v2 import output_statistics_output_dataset as stats

        written = sum(c.written for c in summary.counts.values())
        run = {"eosflow_run": _eosflow_facet(summary)}
        out = {
            "outputStatistics": stats.OutputStatisticsOutputDatasetFacet(
                rowCount=written, producer=producer()
            )
        }
        return run, out

    def fail(self, message: str) -> Any:
        return self._event("FAIL", _failure(message), {})

    def datasets(self, output_facets: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
        """The run's inputs (its topics) and outputs (its sink's: the output, and a change stream's state
        table after it) in OpenLineage's naming, with facets; `output_facets` (the rows written) are the
        output's: the state table's rows are keys, not the batch's rows."""
        from openlineage.client import event_v2

        inputs = [kafka_topic(self.settings, t) for t in self.pipeline.topics]
        outputs = [
            event_v2.OutputDataset(
                output.namespace,
                output.name,
                outputFacets=dict(output_facets) if i == 0 else {},
                facets=_column_facets(self.pipeline, inputs),
            )
            for i, output in enumerate(map(from_uri, self.pipeline.sink.lineage_outputs(self.settings)))
        ]
        return [event_v2.InputDataset(n.namespace, n.name) for n in inputs], outputs

    def _event(self, kind: str, run_facets: Mapping[str, Any], output_facets: Mapping[str, Any]) -> Any:
        inputs, outputs = self.datasets(output_facets)
        processing = "STREAMING" if self.job_kind == "stream" else "BATCH"
        return _run_event(kind, self.run_id, self.job_name, processing, run_facets, inputs, outputs)


def _run_event(
    kind: str,
    run_id: str,
    job_name: str,
    processing: str,
    run_facets: Mapping[str, Any],
    inputs: list[Any],
    outputs: list[Any],
) -> Any:
    """A RunEvent of eosflow's: a pipeline's run or a publisher's, in eosflow's namespace."""
    from openlineage.client import event_v2
    from openlineage.client.facet_v2 import job_type_job

    job_type = job_type_job.JobTypeJobFacet(processing, "EOSFLOW", "JOB", producer=producer())
    return event_v2.RunEvent(
        eventType=event_v2.RunState[kind],
        eventTime=datetime.now(UTC).isoformat(),
        run=event_v2.Run(runId=run_id, facets=dict(run_facets)),
        job=event_v2.Job(namespace=namespace(), name=job_name, facets={"jobType": job_type}),
        producer=producer(),
        inputs=inputs,
        outputs=outputs,
    )


def _failure(message: str) -> dict[str, Any]:
    """A failed run's facet: its one-line reason, as eosflow printed it."""
    from openlineage.client.facet_v2 import error_message_run

    return {"errorMessage": error_message_run.ErrorMessageRunFacet(message, "python", producer=producer())}


@dataclass
class PublishLineage:
    """A publisher's run (`eosflow publish`): the outbox table in, its topic out, and what it published."""

    settings: Settings
    publisher: Publisher
    run_id: str = ""

    def __post_init__(self) -> None:
        self.run_id = self.run_id or _uuid7()

    def start(self) -> Any:
        return self._event("START", {}, {})

    def complete(self, summary: PublishSummary) -> Any:
        import attr
        from openlineage.client.facet_v2 import RunFacet
        from openlineage.client.facet_v2 import output_statistics_output_dataset as stats

        @attr.define
        class EosflowPublishRunFacet(RunFacet):
            publisher: str
            transactions: int
            rows: int
            rejected: int
            position: str | None

            @staticmethod
            def _get_schema() -> str:
                return PUBLISH_FACET_SCHEMA_URL

        at = summary.position
        facet = EosflowPublishRunFacet(
            summary.publisher,
            summary.transactions,
            summary.rows,
            summary.rejected,
            f"{at.xid}/{at.id}" if at is not None else None,
            producer=producer(),
        )
        published = stats.OutputStatisticsOutputDatasetFacet(
            rowCount=summary.rows - summary.rejected, producer=producer()
        )
        return self._event("COMPLETE", {"eosflow_publish": facet}, {"outputStatistics": published})

    def fail(self, message: str) -> Any:
        return self._event("FAIL", _failure(message), {})

    def _event(self, kind: str, run_facets: Mapping[str, Any], output_facets: Mapping[str, Any]) -> Any:
        from openlineage.client import event_v2

        from eosflow.assets import table_uri

        outbox = from_uri(table_uri(self.settings, self.publisher.table))
        topic = kafka_topic(self.settings, self.publisher.topic)
        inputs = [event_v2.InputDataset(outbox.namespace, outbox.name)]
        outputs = [event_v2.OutputDataset(topic.namespace, topic.name, outputFacets=dict(output_facets))]
        name = f"{self.publisher.name}.publish"
        return _run_event(kind, self.run_id, name, "BATCH", run_facets, inputs, outputs)


def as_json(event: Any) -> dict[str, Any]:
    """An event as the spec's JSON (what a transport sends)."""
    from openlineage.client.serde import Serde

    return dict(json.loads(Serde.to_json(event)))


def namespace() -> str:
    return os.environ.get(NAMESPACE_ENV, "").strip() or DEFAULT_NAMESPACE


def _uuid7() -> str:
    """A UUIDv7, time-ordered, as OpenLineage recommends for run ids (its client's generator)."""
    from openlineage.client.uuid import generate_new_uuid

    return str(generate_new_uuid())


# --- sending -------------------------------------------------------------------------------------------

_CONFIG_FILES = (Path.cwd, lambda: Path.home() / ".openlineage")


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the OpenLineage client has a transport to send to: its own rules (OPENLINEAGE_URL,
    OPENLINEAGE_CONFIG, an openlineage.yml in the working directory or ~/.openlineage, OPENLINEAGE__TRANSPORT*
    variables) and not OPENLINEAGE_DISABLED. Unconfigured, the client prints every event to the console,
    which a CLI run must not do."""
    if environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OPENLINEAGE_URL") or environ.get("OPENLINEAGE_CONFIG"):
        return True
    if any(k.startswith("OPENLINEAGE__TRANSPORT") for k in environ):
        return True
    return any((folder() / "openlineage.yml").is_file() for folder in _CONFIG_FILES)


class Emitter:
    """Sends a run's events through the configured OpenLineage client; a failure is a warning."""

    def __init__(self, log: Callable[[str], None]) -> None:
        from openlineage.client import OpenLineageClient

        self.log = log
        self.client = OpenLineageClient()

    def send(self, event: Any) -> None:
        try:
            self.client.emit(event)
        except Exception as exc:  # any transport's failure: lineage never fails a run
            self.log(
                f"warning: the OpenLineage {event.eventType.value} event of {event.job.name} was not sent "
                f"({type(exc).__name__}: {exc}); the run itself is unaffected"
            )

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing after a failed send says nothing new
            self.client.close(timeout=10.0)


def emitter(log: Callable[[str], None]) -> Emitter | None:
    """The CLI's emitter, or None when OpenLineage is not configured (nothing of it imported then)."""
    return Emitter(log) if configured() else None


class Lineage(Protocol):
    """A run's events: a pipeline's (RunLineage) or a publisher's (PublishLineage)."""

    def start(self) -> Any: ...

    def complete(self, summary: Any) -> Any: ...

    def fail(self, message: str) -> Any: ...


class Report:
    """One CLI run's lineage: START when made, then COMPLETE or FAIL; nothing at all when OpenLineage is not
    configured or what is run does not load (the run itself then says why)."""

    def __init__(self, make: Callable[[], Lineage], log: Callable[[str], None]):
        from eosflow.errors import PipelineConfigError

        self.log = log
        self.emitter = emitter(log)
        self.run: Lineage | None = None
        if self.emitter is None:
            return
        try:
            self.run = make()
        except PipelineConfigError:
            self._close()  # the run refuses it, saying why; a database entry's members are runs of their own
            return
        self._send(self.run.start)

    def completed(self, summary: Any) -> None:
        if self.run is not None:
            run = self.run
            self._send(lambda: run.complete(summary))
        self._close()

    def failed(self, message: str) -> None:
        if self.run is not None:
            run = self.run
            self._send(lambda: run.fail(message))
        self._close()

    def _send(self, build: Callable[[], Any]) -> None:
        assert self.emitter is not None
        try:
            event = build()
        except Exception as exc:  # naming an output can fail (a catalog away): the run goes on
            self.log(f"warning: no OpenLineage event for this run ({type(exc).__name__}: {exc})")
            return
        self.emitter.send(event)

    def _close(self) -> None:
        if self.emitter is not None:
            self.emitter.close()
            self.emitter = None


def pipeline_run(settings: Settings, pipeline_name: str, job_kind: str) -> Callable[[], RunLineage]:
    """A pipeline's run as `reporting` makes it (PipelineConfigError when the pipeline does not load)."""
    from eosflow import pipelines

    return lambda: RunLineage(settings, pipelines.load(settings, pipeline_name), job_kind)


@contextlib.contextmanager
def reporting(
    make: Callable[[], Lineage], log: Callable[[str], None], enabled: bool = True
) -> Iterator[Callable[[Any], None]]:
    """One run inside: START on entering, FAIL if it raises (the exception goes on), COMPLETE when the body
    calls what it is given with the run's summary. `enabled=False`: nothing is sent (Airflow's tasks)."""
    from eosflow.runners.outcomes import EXIT, reported

    report = Report(make, log) if enabled else None
    finished: list[Any] = []
    try:
        yield finished.append
    except tuple(EXIT) as exc:
        if report is not None:
            report.failed(reported(exc)[1])
        raise
    except BaseException as exc:
        if report is not None:
            report.failed(f"{type(exc).__name__}: {exc}")
        raise
    if report is not None:
        if finished:
            report.completed(finished[-1])
        else:  # the body returned without a summary (a database entry's members report their own)
            report._close()
