"""DAG factories. The DAG bodies read like the architecture: plan, Spark job, verify."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import (
    DAG,
    Asset,
    AssetOrTimeSchedule,
    AssetWatcher,
    DeltaTriggerTimetable,
    Param,
    dag,
    task_group,
)

from eosflow.ledger.backfill import MODES
from eosflow.observe.health import publisher_stale_limit, stale_limits
from eosflow.pipelines import (
    Pipeline,
    PipelineConfigError,
    PipelineMode,
    databases,
    load_databases,
    load_each,
)
from eosflow.publish.declaration import Publisher, load_each_publisher
from eosflow.settings import Settings, ingest_interval, load
from eosflow_airflow.hooks.eosflow import with_pipelines_variable
from eosflow_airflow.lineage import (
    input_assets,
    mart_assets,
    output_asset,
    table_asset,
    topic_asset,
)
from eosflow_airflow.notifications.alerts import FailureAlert
from eosflow_airflow.operators.spark import EosflowSparkSubmitOperator, ingest_task, spark_job
from eosflow_airflow.operators.tasks import (
    announce,
    backfill_dag_id,
    build_marts,
    compact_targets,
    discover,
    ingest_dag_id,
    marts_dag_id,
    member_job_args,
    pipeline_health,
    plan,
    publish_dag_id,
    publish_rows,
    publisher_health,
    validate_backfill,
    validate_member_backfill,
    verify,
)
from eosflow_airflow.triggers.wake import wake_group_id, wake_trigger

log = logging.getLogger(__name__)

DEFAULT_ARGS = {
    "owner": "eosflow",
    "retries": 2,
    "retry_delay": timedelta(seconds=20),
    # A task that fails after its retries says why in one line: its log, and the alerts webhook if set.
    "on_failure_callback": [FailureAlert()],
}
START = datetime(2026, 1, 1, tzinfo=UTC)


def parse_settings() -> Settings:
    """The settings a DAG file is parsed with: the worker's environment, and the pipelines file the Variable
    eosflow_pipelines names when it is defined (read once per DAG file; no connection is read at parse)."""
    return with_pipelines_variable(load())


def declared_pipelines(settings: Settings | None = None, path: Path | None = None) -> dict[str, Pipeline]:
    """The pipelines pipelines.yml declares that parse. A refused one is left out, with a warning in the
    parse log, so it never takes the others' DAGs with it; dag_files/eosflow_config_errors.py reports it in
    the UI. A fault of the file itself (not YAML, a name twice) still raises: no pipeline can be trusted
    then."""
    good, bad = load_each(settings or parse_settings(), path)
    for name, error in bad.items():
        log.warning("pipeline %r is refused, its DAGs are not made: %s", name, error)
    return good


def declared_publishers(settings: Settings | None = None, path: Path | None = None) -> dict[str, Publisher]:
    """The publishers pipelines.yml declares that parse; a refused one is left out, as a pipeline is."""
    good, bad = load_each_publisher(settings or parse_settings(), path)
    for name, error in bad.items():
        log.warning("publisher %r is refused, its DAG is not made: %s", name, error)
    return good


def refuse_bad_pipelines(settings: Settings | None = None, path: Path | None = None) -> None:
    """Raise one error naming each refused pipeline and publisher and why, for the DAG file that makes no
    DAG: Airflow shows it as that file's import error. The same error raised by a file that makes DAGs
    would hide them all: Airflow marks every DAG of a file with an import error stale
    (dag_processing.collection)."""
    settings = settings or parse_settings()
    _, bad = load_each(settings, path)
    bad |= load_databases(settings, path)[1]
    _, bad_publishers = load_each_publisher(settings, path)
    if bad or bad_publishers:
        lines = [f"- {_naming('pipeline', name, error)}" for name, error in bad.items()]
        lines += [f"- {_naming('publisher', name, error)}" for name, error in bad_publishers.items()]
        raise PipelineConfigError(
            f"{len(lines)} declaration(s) of pipelines.yml refused; their DAGs are not made, every other "
            "pipeline's and publisher's are. Fix each declaration as its reason says:\n" + "\n".join(lines)
        )


def _naming(kind: str, name: str, error: PipelineConfigError) -> str:
    """The refusal as a line that names its pipeline or publisher (the reasons do; this makes sure)."""
    return str(error) if repr(name) in str(error) else f"{kind} {name!r}: {error}"


def wake_asset(pipeline: Pipeline) -> Asset:
    """Records arrived in the pipeline's topics: watched in the triggerer (eosflow_airflow.triggers.wake).

    An asset of the pipeline's own, not its topics': two pipelines reading one topic each wake on it.
    """
    return Asset(
        name=f"wake.{pipeline.name}",
        uri=f"x-eosflow://wake/{pipeline.name}",
        watchers=[AssetWatcher(name=wake_group_id(pipeline.name), trigger=wake_trigger(pipeline))],
    )


def ingest_schedule(pipeline: Pipeline, interval: timedelta):
    """Every interval; with wake_on_records also when records arrive. The interval stays, so a pipeline
    never waits on a triggerer that is down or a wake-up that was lost. A stream pipeline's DAG runs only
    when triggered: `eosflow stream` ingests it, and a run beside it would only fence or be fenced."""
    if pipeline.mode is PipelineMode.STREAM:
        return None
    if not pipeline.wake_on_records:
        return interval
    return AssetOrTimeSchedule(timetable=DeltaTriggerTimetable(interval), assets=[wake_asset(pipeline)])


def _output(pipeline: Pipeline) -> str:
    return pipeline.sink.describe()


def build_ingest_dag(pipeline: Pipeline) -> DAG:
    interval = ingest_interval()

    @dag(
        dag_id=ingest_dag_id(pipeline.name),
        description=f"{', '.join(pipeline.topics)} -> {_output(pipeline)}, exactly once",
        schedule=ingest_schedule(pipeline, interval),
        start_date=START,
        catchup=False,
        # Runs of one pipeline never overlap; fencing guards the rest. Wake-ups during a run coalesce
        # into one run after it.
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        tags=["eosflow", "ingest", f"pipeline:{pipeline.name}"],
        params={
            # Scheduled runs take the default: a loss always stops them until someone accepts it.
            "acknowledge_data_loss": Param(
                False,
                type="boolean",
                description="accept records Kafka deleted before they were read: the plan records "
                "them in the ledger as a 'lost' range and the run continues from the log start",
            ),
        },
        doc_md=f"Ingests `{', '.join(pipeline.topics)}` into {_output(pipeline)}: plan (persisted, "
        "reused by retries), the Spark job (read_committed; each range written by its task, the batch "
        f"committed with its positions: the truth lives in {pipeline.sink.truth}), then the sink's checks. "
        "A data loss stops the run in `plan`; to accept it, trigger with `acknowledge_data_loss`."
        + (
            f" Runs every {interval} and also when records arrive (`wake_on_records`; the wake-up is only a "
            "signal, the plan still comes from the ledger)."
            if pipeline.wake_on_records
            else ""
        ),
    )
    def ingest():
        # The output asset's event comes last: only rows that committed and passed the invariants
        # schedule the DAGs downstream (the marts). The lineage sits on that last task alone: Airflow
        # fails a task whose assets it holds inactive (a name clash), and that must never stop an ingest.
        announce_rows = announce.override(inlets=input_assets(pipeline), outlets=[output_asset(pipeline)])
        (
            plan(pipeline.name)
            >> ingest_task(pipeline.name)
            >> verify(pipeline.name)
            >> announce_rows(pipeline.name)
        )

    return ingest()


def declared_databases(
    settings: Settings | None = None, path: Path | None = None
) -> dict[str, databases.Database]:
    """The `database:` entries pipelines.yml declares that parse; a refused one is left out with a warning,
    as a pipeline is (dag_files/eosflow_config_errors.py names it)."""
    good, bad = load_databases(settings or parse_settings(), path)
    for name, error in bad.items():
        log.warning("database entry %r is refused, its DAG is not made: %s", name, error)
    return good


def build_database_dag(database: databases.Database) -> DAG:
    """A database entry's one ingest DAG: discovery, then per member (a map index each) its Spark job and
    its checks. The members are found when the DAG runs, never when the file is parsed (no Kafka or
    warehouse at parse time)."""
    interval = ingest_interval()
    tables = f"{database.topic_prefix}.<schema>.<table>"

    @dag(
        dag_id=ingest_dag_id(database.name),
        description=f"Debezium's {tables} -> {database.target_schema}.*, each table exactly once",
        schedule=interval,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        tags=["eosflow", "ingest", "database", f"pipeline:{database.name}"],
        doc_md=f"Replicates every table of Debezium's `{tables}` topics"
        + (f" in schemas {', '.join(database.schemas)}" if database.schemas else "")
        + f" into `{database.target_schema}`: `discover` finds the tables and reads their columns from "
        "Debezium's schema block (a table added later, a column added: taken by the next run), then each "
        "table, a member pipeline of its own, runs its Spark job (its changes and positions in one "
        "transaction) and its checks. One member's failure fails its own tasks, not the others'.",
    )
    def replicate():
        @task_group(group_id="member")
        def member(name):
            args = member_job_args(name)
            spark = EosflowSparkSubmitOperator(**spark_job("spark_ingest", application_args=args))
            args >> spark >> verify(name)

        member.expand(name=discover(database.name))

    return replicate()


# The backfill form's sections. Airflow's Trigger dialog shows them as an accordion with one section open
# at a time, at first the one of the params without a section ("Run Parameters"): what every backfill
# needs is there, the range and the rarely changed settings are one click away.
BY_OFFSET = "Range by offset (empty: everything)"
BY_TIME = "Range by time (instead of offsets)"
ADVANCED = "Topic and chunk size"


def _backfill_params() -> dict[str, Param]:
    """The backfill form: what every backfill DAG asks (a database entry's adds the table)."""
    return {
        "mode": Param(
            "catch-up",
            enum=list(MODES),
            values_display={
                "catch-up": "Catch up: read forward from the stored position",
                "replay": "Replay: re-read and re-commit offsets already committed",
            },
            title="Mode",
            description="A catch-up starts at the pipeline's stored position; a replay replaces what "
            "was committed for the range (e.g. after a transform change).",
        ),
        "partitions": Param("all", type="string", title="Partitions", description="all, or a list like 0,2."),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run: only validate and list the chunks",
            description="Checks the whole request and lists the chunks in the validate task's log; no "
            "Spark job runs and nothing is committed (spark_chunk and verify show as skipped).",
        ),
        "from_offset": Param(
            None,
            type=["null", "integer"],
            minimum=0,
            title="From offset",
            description="First offset of the range in each chosen partition (a catch-up must start at "
            "the stored position). Empty: the stored position (catch-up) or the first committed "
            "offset (replay).",
            section=BY_OFFSET,
        ),
        "to_offset": Param(
            None,
            type=["null", "integer"],
            minimum=0,
            title="To offset (exclusive)",
            description="End of the range, not included. Empty: the last stable offset (catch-up) or "
            "the stored position (replay).",
            section=BY_OFFSET,
        ),
        "from_time": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="From time",
            description="Instead of From offset: the first record at or after this time, in each "
            "partition. The picker uses the UI's time zone; through the API, ISO-8601 with a zone.",
            section=BY_TIME,
        ),
        "to_time": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="To time",
            description="Instead of To offset: the range ends before the first record at or after this time.",
            section=BY_TIME,
        ),
        "topic": Param(
            None,
            type=["null", "string"],
            title="Topic",
            description="Only for a pipeline reading several topics; empty: the pipeline's only topic.",
            section=ADVANCED,
        ),
        "chunk_size": Param(
            100_000,
            type="integer",
            minimum=1,
            title="Chunk size (offsets per Spark job)",
            description="Each chunk is one Spark job and one commit; the chunks of a partition commit "
            "in order.",
            section=ADVANCED,
        ),
    }


def build_backfill_dag(pipeline: Pipeline) -> DAG:
    """The pipeline's own backfill DAG: the pipeline is the DAG's, not a param, so Airflow's per-DAG
    permissions say who may replay which pipeline (one DAG for all would let anyone who may trigger it
    replay any)."""

    @dag(
        dag_id=backfill_dag_id(pipeline.name),
        description=f"Catch up or replay an offset range of {pipeline.name}, in ordered chunks",
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        tags=["eosflow", "backfill", f"pipeline:{pipeline.name}"],
        # A form, not a list of raw names: titles, sections, a date-time picker for the time bounds, and a
        # dry run. The keys stay as they were: `conf` of the REST API and the CLI use them.
        params=_backfill_params(),
        doc_md=f"Catches up or replays `{pipeline.name}` ({', '.join(pipeline.topics)} -> "
        f"{_output(pipeline)}). Validates everything first (partitions, bounds, stored position, committed "
        "ranges); then one Spark job per chunk, in order per partition; then the invariants. "
        "Tick **Dry run** to stop after the validation: its log lists the chunks a real run would commit.",
    )
    def backfill():
        # A dry run returns no chunk: spark_chunk maps to nothing, verify skips.
        chunks = validate_backfill(pipeline.name)
        # One chunk at a time, in map order: a catch-up chunk can only commit after the one before it.
        loads = EosflowSparkSubmitOperator.partial(
            **spark_job("spark_chunk", max_active_tis_per_dagrun=1)
        ).expand(application_args=chunks)
        # The pipeline's own output asset, as its ingest DAG emits it (the marts DAG is scheduled on it).
        announce_rows = announce.override(inlets=input_assets(pipeline), outlets=[output_asset(pipeline)])
        loads >> verify(pipeline.name) >> announce_rows(pipeline.name, upstream="validate")

    return backfill()


def build_database_backfill_dag(database: databases.Database) -> DAG:
    """A database entry's backfill DAG: the form of a pipeline's, and the table (a member's name). Who may
    trigger it may backfill every table of the entry, as who may trigger its ingest DAG ingests them all."""

    @dag(
        dag_id=backfill_dag_id(database.name),
        description=f"Catch up or replay an offset range of one table of {database.name}, in ordered chunks",
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        tags=["eosflow", "backfill", "database", f"pipeline:{database.name}"],
        params={
            "member": Param(
                "",
                type="string",
                title="Table (member)",
                description=f"The member pipeline to backfill, e.g. {database.name}__customers "
                f"(`eosflow discover --pipeline {database.name}` lists them).",
            ),
        }
        | _backfill_params(),
        doc_md=f"Catches up or replays one table of `{database.name}`: name its member. A replay of a "
        "state table replaces the range's changelog rows and recomputes every key they held from the "
        "changelog. Validates everything first; then one Spark job per chunk; then the member's checks.",
    )
    def backfill():
        chunks = validate_member_backfill(database.name)
        loads = EosflowSparkSubmitOperator.partial(
            **spark_job("spark_chunk", max_active_tis_per_dagrun=1)
        ).expand(application_args=chunks)
        loads >> verify("{{ params.member }}")

    return backfill()


def build_marts_dag(pipeline: Pipeline) -> DAG:
    """The pipeline's dbt marts, rebuilt whenever its ingest or a backfill commits rows (its asset)."""
    source = output_asset(pipeline)
    # A stream commits outside Airflow and emits no asset event: its marts also rebuild every interval.
    interval = ingest_interval()
    schedule = (
        AssetOrTimeSchedule(timetable=DeltaTriggerTimetable(interval), assets=[source])
        if pipeline.mode is PipelineMode.STREAM
        else [source]
    )

    @dag(
        dag_id=marts_dag_id(pipeline.name),
        description=f"dbt marts of {pipeline.target_table}, on every commit of new rows",
        schedule=schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,  # events during a build queue into one run after it
        default_args=DEFAULT_ARGS,
        tags=["eosflow", "marts", f"pipeline:{pipeline.name}"],
        doc_md=f"Runs when `{source.uri}` is updated: the ingest DAG and backfills emit that asset only "
        "when a run committed rows (and its invariants passed). `dbt build --select tag:orders`: "
        "the marts and their tests.",
    )
    def marts():
        build_marts.override(inlets=[source], outlets=mart_assets(pipeline))(pipeline.name)

    return marts()


def build_compact_dag() -> DAG:
    @dag(
        dag_id="eosflow_compact",
        description="Merge adjacent committed children of every partitioned target",
        schedule=timedelta(hours=1),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        tags=["eosflow", "maintenance"],
        doc_md="Every commit attaches its ranges to the target as child tables; this merges adjacent "
        "ones (at most 5M rows each) so their number stays bounded. Each merge takes the same locks as a "
        "commit of its partition; one that finds the target busy is left for the next hour.",
    )
    def compact():
        compact_targets()

    return compact()


def build_publish_dag(publisher: Publisher) -> DAG:
    """Every few minutes, what the outbox committed since into its topic (`eosflow publish`)."""
    interval = timedelta(minutes=int(os.environ.get("EOSFLOW_PUBLISH_INTERVAL_MINUTES", "5")))
    table, topic = table_asset(publisher.table), topic_asset(publisher.topic)

    @dag(
        dag_id=publish_dag_id(publisher.name),
        description=f"{publisher.table} -> Kafka topic {publisher.topic}, exactly once",
        # Also as soon as its table is rebuilt (a marts DAG emits it): the interval still catches rows
        # written by anything else.
        schedule=AssetOrTimeSchedule(timetable=DeltaTriggerTimetable(interval), assets=[table]),
        start_date=START,
        catchup=False,
        max_active_runs=1,  # one publisher at a time; a second one would fence the first
        default_args=DEFAULT_ARGS,
        tags=["eosflow", "publish", f"publisher:{publisher.name}"],
        doc_md=f"Publishes the committed rows of `{publisher.table}` to `{publisher.topic}`: each batch and "
        "its position in one Kafka transaction; a retried or cleared task continues from the position.",
    )
    def publish_dag():
        publish_rows.override(inlets=[table], outlets=[topic])(publisher.name)

    return publish_dag()


def build_health_dag(
    pipelines: dict[str, Pipeline], publishers: dict[str, Publisher] | None = None
) -> DAG | None:
    """Every few minutes, whether each pipeline keeps up, and whether an open transaction holds a
    publisher's rows back (none declared: no DAG)."""
    publishers = publishers or {}
    if not pipelines and not publishers:
        return None
    limits = stale_limits(pipelines)
    listed = ", ".join(f"{name} {limit / 60:g} min" for name, limit in limits.items())
    held_limit = publisher_stale_limit()

    @dag(
        dag_id="eosflow_health",
        description="Records wait and a pipeline has not committed for N intervals: fail with the reason",
        schedule=timedelta(minutes=5),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,  # a retry rides out a Kafka or Postgres hiccup; STALE never retries
        tags=["eosflow", "health"],
        doc_md="Fails, with one line per pipeline and its on-failure alert, when a pipeline's records wait "
        "in Kafka and it has not committed within its limit: a batch pipeline's EOSFLOW_STALE_INTERVALS "
        "(3) ingest intervals (its DAG paused, failing or stuck), a stream pipeline's "
        "EOSFLOW_STREAM_STALE_MINUTES (5; is `eosflow stream` running?). Streams run as services, not in "
        "Airflow: a task that never ends would hold a worker slot, and a scheduler or worker restart would "
        f"kill it. An idle pipeline is healthy. Limits: {listed}. Publishers fail it when an open "
        "transaction has held their committed rows back for EOSFLOW_PUBLISH_STALE_MINUTES "
        f"({held_limit / 60:g}), naming that transaction.",
    )
    def health():
        if pipelines:
            pipeline_health(limits)
        if publishers:
            publisher_health(sorted(publishers), held_limit)

    return health()
