"""Airflow Assets for what eosflow reads and writes, so Airflow draws (and schedules on) the lineage.

URIs follow the providers' formats: `postgres://host:port/database/schema/table` (the Postgres
provider's) and `kafka://bootstrap-server/topic` (the Kafka provider's). They are built from the
EOSFLOW_* settings, at DAG parse time (no connection is looked up there) and again when an event is
emitted, so both sides name one asset; `eosflow airflow` builds its connections from the same settings.

An asset's name is its URI (Airflow's default). Airflow keeps names and URIs unique among active assets, so
a name kept while its URI changed (a warehouse moved, or eosflow's own URIs before these) would leave the
new asset inactive, and a task naming it failed, until the scheduler orphans the old one.
"""

from __future__ import annotations

from airflow.sdk import Asset

from eosflow.assets import table_uri, topic_uri
from eosflow.dbt_build import MART_COLUMNS
from eosflow.pipelines import Pipeline
from eosflow.settings import Settings, load

# The orders marts (tag `orders` in the dbt project), in the schema dbt gives the pipeline.
MART_TABLES = ("order_events", "event_counts_hourly", "orders_published")


def table_asset(table: str, settings: Settings | None = None) -> Asset:
    """A warehouse table, `schema.table`."""
    return Asset(uri=table_uri(settings or load(), table))


def topic_asset(topic: str, settings: Settings | None = None) -> Asset:
    return Asset(uri=topic_uri(settings or load(), topic))


def input_assets(pipeline: Pipeline, settings: Settings | None = None) -> list[Asset]:
    return [topic_asset(t, settings) for t in pipeline.topics]


def output_asset(pipeline: Pipeline, settings: Settings | None = None) -> Asset:
    """The pipeline's output (its sink's table, topic, ...): emitted when a run commits rows to it."""
    return Asset(uri=pipeline.sink.output_uri(settings or load()))


def has_marts(pipeline: Pipeline) -> bool:
    """The orders marts are built on a sink's warehouse table, for pipelines that declare their columns."""
    declared = {c.name for c in pipeline.schema.columns}
    return pipeline.sink.table is not None and declared >= MART_COLUMNS


def mart_assets(pipeline: Pipeline, settings: Settings | None = None) -> list[Asset]:
    # dbt's schema for a pipeline: `analytics`, or `analytics_<pipeline>` (macros/generate_schema_name.sql)
    schema = "analytics" if pipeline.name == "orders" else f"analytics_{pipeline.name}"
    return [table_asset(f"{schema}.{t}", settings) for t in MART_TABLES]
