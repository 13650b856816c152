"""What a run connects to (Kafka, the warehouse, the schema registry, Spark) and how it runs, read from the
environment in one place. Airflow's connections fill the same fields when a task runs (eosflow_airflow).

Defaults are the local stack's endpoints, chosen to stay off the ports a developer's own Kafka or Postgres
would use. The stack's own servers' settings are the dev tools' (eosflow_dev.stack.settings).
See docs/reference/environment.md (generated) and docs/getting-started.md, "Configuration".
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from psycopg.conninfo import make_conninfo

if TYPE_CHECKING:
    from eosflow.schema.avro import RegistryConfig  # imported when used: the settings load first


def _project_root() -> Path:
    """Where pipelines.yml and the state folder are: EOSFLOW_HOME, else the checkout this file is in
    (src/eosflow/settings.py), else, for an installed eosflow, the current directory."""
    env = os.environ.get("EOSFLOW_HOME")
    if env:
        return Path(env).resolve()
    checkout = Path(__file__).resolve().parents[2]
    return checkout if (checkout / "pyproject.toml").exists() else Path.cwd().resolve()


def _default_jars_dir(root: Path) -> Path:
    """A checkout's git-ignored cache; for an installed eosflow, a folder of the environment pip installed it
    into (a virtualenv, an image), so `eosflow jars fetch` at the image's build needs no setting."""
    if (Path(__file__).resolve().parents[2] / "pyproject.toml").exists():  # running from a checkout
        return root / ".cache" / "jars"
    return Path(sys.prefix) / "share" / "eosflow" / "jars"


def _spark_remote(raw: str) -> str:
    """A Spark Connect URL, or "" for none; anything else is refused before a run starts."""
    url = raw.strip()
    if url and not url.startswith("sc://"):
        raise SystemExit(
            f"EOSFLOW_SPARK_REMOTE={url!r} is not a Spark Connect URL: set it to sc://host:port (the "
            "server's gRPC port, 15002 by default), or unset it to let each run start its own Spark"
        )
    return url


def _json_object(name: str) -> tuple[tuple[str, str], ...]:
    """An environment variable holding a JSON object of settings, as sorted (name, text) pairs."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except ValueError as exc:
        example = '{"name": "value"}'
        raise SystemExit(f"{name} is not JSON ({exc}); set it to an object like {example}") from None
    if not isinstance(value, dict) or not all(isinstance(v, str | int | bool) for v in value.values()):
        raise SystemExit(f"{name} must be a JSON object of names to strings or numbers")
    pairs = ((str(k), str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items())
    return tuple(sorted(pairs))


INLINE_MAX_OFFSETS = 200_000  # docs/DESIGN.md, step 2: below it a JVM costs more than it spreads


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(
            f"{name}={raw!r} is not a whole number; set it to a port or count, or unset it"
        ) from None


@dataclass(frozen=True)
class Settings:
    root: Path
    state_dir: Path  # everything the stack writes at run time (git-ignored)
    jars_dir: Path  # Maven downloads (git-ignored cache)
    kafka_host: str
    kafka_port: int
    pg_host: str
    pg_port: int
    pg_database: str
    pg_user: str
    pg_password: str = field(repr=False)  # secrets stay out of repr, and so out of logs and tracebacks
    # The read-only role the Airflow view and the metrics use (the stack creates it; docs/readonly-role.sql).
    pg_reader_user: str = "eosflow_reader"
    pg_reader_password: str = field(default="eosflow_reader", repr=False)
    # The user's own Kafka: several brokers (EOSFLOW_KAFKA_BOOTSTRAP_SERVERS, instead of host and
    # port) and the rest of the client configuration (EOSFLOW_KAFKA_CONFIG: SASL, TLS, ...).
    kafka_bootstrap: str = ""
    kafka_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # sasl.password, ...
    # How long eosflow's planner waits for Kafka to answer before the run fails (exit 1, retry allowed);
    # refused credentials fail at once.
    kafka_timeout_s: int = 30
    # libpq connection parameters beyond host, port, database, user, password (EOSFLOW_PG_OPTIONS:
    # sslmode, sslrootcert, ...).
    pg_options: tuple[tuple[str, str], ...] = ()
    # The schema registry Avro pipelines decode with (its Confluent-compatible API), and its client
    # settings (EOSFLOW_SCHEMA_REGISTRY_CONFIG: basic.auth.user.info, ssl.ca.location, ...).
    # Unset: the local stack's (`registry_port`; 0: the stack runs none).
    schema_registry_url: str = ""
    schema_registry_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    registry_port: int = 18081
    # An Iceberg sink's catalog properties as Airflow's `iceberg_default` connection gives them; None: read
    # EOSFLOW_ICEBERG_CATALOG_PROPERTIES (eosflow.sinks.iceberg.config). May hold credentials.
    iceberg_catalog_properties: tuple[tuple[str, str], ...] | None = field(default=None, repr=False)
    # The pipelines file as Airflow's Variable `eosflow_pipelines` names it; None: EOSFLOW_PIPELINES, else
    # <root>/pipelines.yml (eosflow.pipelines.pipelines_file).
    pipelines_path: Path | None = None
    # A plan spanning at most this many offsets is read in the run's own process, without Spark
    # (eosflow.sources.kafka.inline): a JVM and a Python worker cost more than such a batch.
    # 0: every plan through Spark. EOSFLOW_INLINE_MAX_OFFSETS.
    inline_max_offsets: int = INLINE_MAX_OFFSETS
    # A Spark Connect server (sc://host:port) a run sends its Spark work to; "": each run starts its own Spark
    # (DESIGN.md, "A warm Spark"). EOSFLOW_SPARK_REMOTE, or an Airflow Spark connection whose host is sc://.
    spark_remote: str = ""

    @property
    def bootstrap_servers(self) -> str:
        """EOSFLOW_KAFKA_BOOTSTRAP_SERVERS, else the local stack's broker."""
        return self.kafka_bootstrap or f"{self.kafka_host}:{self.kafka_port}"

    @property
    def kafka(self) -> dict[str, str]:
        """The whole Kafka client configuration every client eosflow makes gets (eosflow.kafka_client)."""
        return {"bootstrap.servers": self.bootstrap_servers, **dict(self.kafka_config)}

    @property
    def warehouse_dsn(self) -> str:
        # make_conninfo quotes each value: a password with spaces, quotes or backslashes stays itself.
        return make_conninfo(
            host=self.pg_host,
            port=self.pg_port,
            dbname=self.pg_database,
            user=self.pg_user,
            password=self.pg_password,
            **dict(self.pg_options),
        )

    @property
    def reader_dsn(self) -> str:
        """The warehouse as the read-only role: what the Airflow view and the metrics connect with."""
        return make_conninfo(
            host=self.pg_host,
            port=self.pg_port,
            dbname=self.pg_database,
            user=self.pg_reader_user,
            password=self.pg_reader_password,
            **dict(self.pg_options),
        )

    @property
    def warehouse_uri(self) -> str:
        """The same connection as a URI (Airflow's connections take this form), every part quoted."""
        query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in self.pg_options)
        user, password, database = (
            quote(x, safe="") for x in (self.pg_user, self.pg_password, self.pg_database)
        )
        uri = f"postgresql://{user}:{password}@{self.pg_host}:{self.pg_port}/{database}"
        return uri + (f"?{query}" if query else "")

    @property
    def stack_registry_url(self) -> str:
        """The local stack's schema registry (Apicurio's Confluent-compatible API)."""
        return f"http://{self.kafka_host}:{self.registry_port}/apis/ccompat/v7"

    @property
    def registry(self) -> RegistryConfig | None:
        """The schema registry Avro pipelines use: EOSFLOW_SCHEMA_REGISTRY_URL, else the stack's, if any."""
        url = self.schema_registry_url or (self.stack_registry_url if self.registry_port else "")
        if not url:
            return None
        from eosflow.schema.avro import RegistryConfig

        try:
            return RegistryConfig(url, self.schema_registry_config)
        except ValueError as exc:
            raise SystemExit(f"EOSFLOW_SCHEMA_REGISTRY_URL / _CONFIG: {exc}") from None


def ingest_interval() -> timedelta:
    """How often a batch pipeline's ingest DAG runs (EOSFLOW_INGEST_INTERVAL_MINUTES, default 5): the DAGs
    run on it, and the health rule counts in it."""
    return timedelta(minutes=int(os.environ.get("EOSFLOW_INGEST_INTERVAL_MINUTES", "5")))


def load() -> Settings:
    root = _project_root()
    state_dir = Path(os.environ.get("EOSFLOW_STATE_DIR") or root / ".stack").resolve()
    jars_dir = Path(os.environ.get("EOSFLOW_JARS_DIR") or _default_jars_dir(root)).resolve()
    return Settings(
        root=root,
        state_dir=state_dir,
        jars_dir=jars_dir,
        kafka_host=os.environ.get("EOSFLOW_KAFKA_HOST", "127.0.0.1"),
        kafka_port=_int("EOSFLOW_KAFKA_PORT", 19092),
        pg_host=os.environ.get("EOSFLOW_PG_HOST", "127.0.0.1"),
        pg_port=_int("EOSFLOW_PG_PORT", 15432),
        pg_database=os.environ.get("EOSFLOW_PG_DATABASE", "warehouse"),
        pg_user=os.environ.get("EOSFLOW_PG_USER", "eosflow"),
        pg_password=os.environ.get("EOSFLOW_PG_PASSWORD", "eosflow"),
        pg_reader_user=os.environ.get("EOSFLOW_PG_READER_USER", "eosflow_reader"),
        pg_reader_password=os.environ.get("EOSFLOW_PG_READER_PASSWORD", "eosflow_reader"),
        kafka_bootstrap=os.environ.get("EOSFLOW_KAFKA_BOOTSTRAP_SERVERS", "").strip(),
        kafka_config=_json_object("EOSFLOW_KAFKA_CONFIG"),
        kafka_timeout_s=_int("EOSFLOW_KAFKA_TIMEOUT_S", 30),
        pg_options=_json_object("EOSFLOW_PG_OPTIONS"),
        schema_registry_url=os.environ.get("EOSFLOW_SCHEMA_REGISTRY_URL", "").strip(),
        schema_registry_config=_json_object("EOSFLOW_SCHEMA_REGISTRY_CONFIG"),
        registry_port=_int("EOSFLOW_REGISTRY_PORT", 18081),
        inline_max_offsets=_int("EOSFLOW_INLINE_MAX_OFFSETS", INLINE_MAX_OFFSETS),
        spark_remote=_spark_remote(os.environ.get("EOSFLOW_SPARK_REMOTE", "")),
    )
