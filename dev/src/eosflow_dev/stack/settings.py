"""The local stack's own settings: the ports and names of the servers `eosflow stack` runs beside the broker
and the warehouse, which no pipeline reads.

eosflow's `Settings` holds what a run connects to (Kafka, the warehouse, the schema registry, Spark); a
`StackSettings` is those and these, read from the environment by the dev tools (stack, lab, bench, demo).
See docs/reference/environment.md (generated): its "read in" column says which of the two reads a variable.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from eosflow import settings as product
from eosflow.settings import Settings, _int


@dataclass(frozen=True)
class StackSettings(Settings):
    # The broker's KRaft controller listener.
    kafka_controller_port: int = 19093
    airflow_port: int = 8080
    # The producer-retries lab: an extra broker listener whose advertised address is a toxiproxy
    # port, so clients that follow metadata stay behind the fault-injecting proxy. 0 = off.
    kafka_proxied_port: int = 0
    kafka_proxy_port: int = 19094  # where toxiproxy listens for Kafka; advertised for PROXIED
    toxiproxy_api_port: int = 18474
    # A SASL/PLAIN listener (user eosflow, password EOSFLOW_KAFKA_SASL_PASSWORD), for testing clients
    # against a broker that requires authentication. 0 = off.
    kafka_sasl_port: int = 19095
    kafka_sasl_password: str = field(default="eosflow-sasl", repr=False)
    # The optional servers (`eosflow stack up --with iceberg-rest,s3`): Iceberg's REST catalog, its
    # warehouse in files ("file") or in the stack's S3 server ("s3"); the S3 server and its bucket.
    iceberg_rest_port: int = 18181
    iceberg_rest_storage: str = "file"
    s3_port: int = 19000
    s3_bucket: str = "eosflow"
    # Kafka Connect with Debezium (`--with connect`): its REST port, its group (also its internal topics'
    # prefix), and the database it streams changes of, owned by a LOGIN REPLICATION role.
    connect_port: int = 18083
    connect_group: str = "eosflow-connect"
    source_database: str = "source"
    source_user: str = "eosflow_source"

    @property
    def stack_bootstrap_servers(self) -> str:
        """The stack's broker, whatever Kafka the pipelines use (EOSFLOW_KAFKA_BOOTSTRAP_SERVERS)."""
        return f"{self.kafka_host}:{self.kafka_port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL/PLAIN listener (user `eosflow`, password kafka_sasl_password)."""
        return f"{self.kafka_host}:{self.kafka_sasl_port}"

    @property
    def proxied_bootstrap_servers(self) -> str:
        """Bootstrap through toxiproxy: every request and response then crosses the proxy."""
        return f"{self.kafka_host}:{self.kafka_proxy_port}"

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"


def of(settings: Settings) -> StackSettings:
    """`settings` with the stack's own settings read from the environment (itself, if it has them)."""
    if isinstance(settings, StackSettings):
        return settings
    return StackSettings(
        **{f.name: getattr(settings, f.name) for f in dataclasses.fields(Settings)},
        kafka_controller_port=_int("EOSFLOW_KAFKA_CONTROLLER_PORT", 19093),
        airflow_port=_int("EOSFLOW_AIRFLOW_PORT", 8080),
        kafka_proxied_port=_int("EOSFLOW_KAFKA_PROXIED_PORT", 0),
        kafka_proxy_port=_int("EOSFLOW_KAFKA_PROXY_PORT", 19094),
        toxiproxy_api_port=_int("EOSFLOW_TOXIPROXY_PORT", 18474),
        kafka_sasl_port=_int("EOSFLOW_KAFKA_SASL_PORT", 19095),
        kafka_sasl_password=os.environ.get("EOSFLOW_KAFKA_SASL_PASSWORD", "eosflow-sasl"),
        iceberg_rest_port=_int("EOSFLOW_ICEBERG_REST_PORT", 18181),
        iceberg_rest_storage=os.environ.get("EOSFLOW_ICEBERG_REST_STORAGE", "file").strip() or "file",
        s3_port=_int("EOSFLOW_S3_PORT", 19000),
        s3_bucket=os.environ.get("EOSFLOW_S3_BUCKET", "eosflow").strip() or "eosflow",
        connect_port=_int("EOSFLOW_CONNECT_PORT", 18083),
        connect_group=os.environ.get("EOSFLOW_CONNECT_GROUP", "eosflow-connect").strip() or "eosflow-connect",
        source_database=os.environ.get("EOSFLOW_SOURCE_DATABASE", "source").strip() or "source",
        source_user=os.environ.get("EOSFLOW_SOURCE_USER", "eosflow_source").strip() or "eosflow_source",
    )


def load() -> StackSettings:
    """What a run connects to (eosflow.settings.load) and the stack's own ports, from the environment."""
    return of(product.load())
