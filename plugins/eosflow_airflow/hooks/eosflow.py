"""Hooks: eosflow Settings built from Airflow connections (`warehouse`, `kafka_default`, and, when defined,
`iceberg_default` and `eosflow_schema_registry`: eosflow_airflow.hooks.connection_types) and the Variable
`eosflow_pipelines` (the pipelines file's path on the workers).

Connections are the one place an Airflow deployment configures where Kafka, the warehouse and the
Iceberg catalog are; the Spark job receives the same values as EOSFLOW_* variables. What is not defined
falls back to the worker's environment, the EOSFLOW_* variables the stand-alone CLI reads.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TypedDict

from airflow.sdk.bases.hook import BaseHook

from eosflow import settings as settings_mod
from eosflow.errors import PipelineConfigError
from eosflow_airflow.hooks.connection_types import IcebergCatalogHook, SchemaRegistryHook


class _Registry(TypedDict, total=False):
    """The Settings fields the schema registry connection sets, when it is defined."""

    schema_registry_url: str
    schema_registry_config: tuple[tuple[str, str], ...]


WAREHOUSE_CONN_ID = "warehouse"
KAFKA_CONN_ID = "kafka_default"
READER_CONN_ID = "warehouse_readonly"
PIPELINES_VARIABLE = "eosflow_pipelines"


def pipelines_variable() -> Path | None:
    """The pipelines file's path as the Variable `eosflow_pipelines` holds it, or None when it is not defined
    (EOSFLOW_PIPELINES, else <EOSFLOW_HOME>/pipelines.yml). A path, absolute: the DAG processor and the
    workers read it from their own working directories."""
    from airflow.sdk import Variable

    value = str(Variable.get(PIPELINES_VARIABLE, default=None) or "").strip()
    if not value:
        return None
    if "\n" in value or not value.startswith("/"):
        shown = value.splitlines()[0][:80]
        raise PipelineConfigError(
            f"the Airflow Variable {PIPELINES_VARIABLE} must hold the absolute path of the pipelines file on "
            f"the workers (as /opt/airflow/eosflow/pipelines.yml), not {shown!r}"
            + ("...: the file's YAML goes in the file" if "\n" in value else "")
        )
    return Path(value)


def with_pipelines_variable(settings: settings_mod.Settings) -> settings_mod.Settings:
    """The settings with the pipelines file the Variable names, when it is defined."""
    path = pipelines_variable()
    return settings if path is None else dataclasses.replace(settings, pipelines_path=path)


class EosflowHook(BaseHook):
    """Where Kafka and the warehouse are, read from Airflow's connections."""

    def __init__(
        self, warehouse_conn_id: str = WAREHOUSE_CONN_ID, kafka_conn_id: str = KAFKA_CONN_ID
    ) -> None:
        super().__init__()
        self.warehouse_conn_id = warehouse_conn_id
        self.kafka_conn_id = kafka_conn_id

    def settings(self) -> settings_mod.Settings:
        """The connections' settings: `kafka_default`'s extra is the whole Kafka client configuration
        (as the Kafka provider keeps it: bootstrap.servers, security.protocol, sasl.*, ...), the
        warehouse connection's extra the libpq parameters beyond host, port, database and login."""
        base = settings_mod.load()
        wh = self.get_connection(self.warehouse_conn_id)
        kafka = dict(self.get_connection(self.kafka_conn_id).extra_dejson)
        bootstrap = str(kafka.pop("bootstrap.servers", "") or base.bootstrap_servers)
        return dataclasses.replace(
            with_pipelines_variable(base),
            pg_host=wh.host or base.pg_host,
            pg_port=int(wh.port or base.pg_port),
            pg_database=wh.schema or base.pg_database,
            pg_user=wh.login or base.pg_user,
            pg_password=wh.password or base.pg_password,
            pg_options=tuple(sorted((k, str(v)) for k, v in wh.extra_dejson.items())) or base.pg_options,
            kafka_bootstrap=bootstrap,
            kafka_config=tuple(sorted((k, str(v)) for k, v in kafka.items())) or base.kafka_config,
            iceberg_catalog_properties=self.iceberg_catalog_properties(),
            **self._registry(),
        )

    @staticmethod
    def _registry() -> _Registry:
        """The schema registry from the `eosflow_schema_registry` connection, when it is defined."""
        found = SchemaRegistryHook().client_settings()
        if found is None:
            return _Registry()
        url, config = found
        return _Registry(schema_registry_url=url, schema_registry_config=config)  # the connection, all of it

    def iceberg_catalog_properties(self) -> tuple[tuple[str, str], ...] | None:
        """PyIceberg catalog properties from the `iceberg_default` connection (type eosflow_iceberg), or None
        (none defined: the worker's EOSFLOW_ICEBERG_CATALOG_PROPERTIES and PyIceberg's own configuration)."""
        return IcebergCatalogHook().catalog_properties()

    def spark_remote(self, spark_conn_id: str) -> str:
        """The Spark Connect URL the Spark tasks' connection names, or "" for a spark-submit connection:
        the provider's `spark_connect` type (its hook makes the URL, User ID and Token included), or a Spark
        connection whose host is an sc:// URL. The URL may hold a token: it stays in this process."""
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        conn = self.get_connection(spark_conn_id)
        if conn.conn_type == SparkConnectHook.conn_type or (conn.host or "").startswith("sc://"):
            return SparkConnectHook(spark_conn_id).get_connection_url()  # always sc://
        return ""

    def reader_settings(self) -> settings_mod.Settings:
        """The same settings, logged in as the read-only role (connection `warehouse_readonly`, else
        EOSFLOW_PG_READER_*): what the eosflow view and the metrics use. The owner's password is not in
        them, so nothing they run can write."""
        s = self.settings()
        user, password = s.pg_reader_user, s.pg_reader_password
        try:
            conn = self.get_connection(READER_CONN_ID)
            user, password = conn.login or user, conn.password or password
        except Exception:  # noqa: BLE001 - not defined: the EOSFLOW_PG_READER_* settings
            pass
        return dataclasses.replace(
            s, pg_user=user, pg_password=password, pg_reader_user=user, pg_reader_password=password
        )

    def job_env(self, settings: settings_mod.Settings | None = None) -> dict[str, str]:
        """The same settings as environment for the spark-submit'ed job (eosflow.settings.load reads it)."""
        s = settings or self.settings()
        return (
            {
                "EOSFLOW_PG_HOST": s.pg_host,
                "EOSFLOW_PG_PORT": str(s.pg_port),
                "EOSFLOW_PG_DATABASE": s.pg_database,
                "EOSFLOW_PG_USER": s.pg_user,
                "EOSFLOW_PG_PASSWORD": s.pg_password,
                "EOSFLOW_PG_OPTIONS": json.dumps(dict(s.pg_options)),
                "EOSFLOW_KAFKA_BOOTSTRAP_SERVERS": s.bootstrap_servers,
                "EOSFLOW_KAFKA_CONFIG": json.dumps(dict(s.kafka_config)),
            }
            | ({} if s.pipelines_path is None else {"EOSFLOW_PIPELINES": str(s.pipelines_path)})
            | (
                {}
                if not s.schema_registry_url
                else {
                    "EOSFLOW_SCHEMA_REGISTRY_URL": s.schema_registry_url,
                    "EOSFLOW_SCHEMA_REGISTRY_CONFIG": json.dumps(dict(s.schema_registry_config)),
                }
            )
            | (
                {}
                if s.iceberg_catalog_properties is None
                else {"EOSFLOW_ICEBERG_CATALOG_PROPERTIES": json.dumps(dict(s.iceberg_catalog_properties))}
            )
        )
