"""Data named as lineage asset URIs (the OpenLineage naming Airflow's assets use): a warehouse table,
a Kafka topic. The sinks name their outputs with them; the Airflow glue names inputs and marts."""

from __future__ import annotations

from eosflow.settings import Settings


def table_uri(settings: Settings, table: str) -> str:
    schema, _, name = table.rpartition(".")
    s = settings
    return f"postgres://{s.pg_host}:{s.pg_port}/{s.pg_database}/{schema or 'raw'}/{name}"


def topic_uri(settings: Settings, topic: str) -> str:
    server = settings.bootstrap_servers.split(",")[0].strip()
    return f"kafka://{server}/{topic}"
