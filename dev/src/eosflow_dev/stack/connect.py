"""Kafka Connect with Debezium's PostgreSQL connector for the stack, started only when asked
(`eosflow stack up --with connect`). Dev tooling: the product never imports it.

One distributed worker (org.apache.kafka.connect.cli.ConnectDistributed), Kafka's own connect-* jars at
the broker's version with Debezium 3.6.1's plugin archive on its plugin.path, in a class loader of its
own (infra/maven/connect/pom.xml). Against the stack's broker (StackSettings.bootstrap_servers; the librdkafka
settings of EOSFLOW_KAFKA_CONFIG are not passed on, so a secured Kafka is not supported), REST on
http://127.0.0.1:18083 (EOSFLOW_CONNECT_PORT), group EOSFLOW_CONNECT_GROUP (default eosflow-connect),
whose name prefixes its internal topics (-configs, -offsets, -status; one replica). Exactly-once source
support is on (KIP-618, exactly.once.source.support=enabled): every source task writes its records and
its source offsets in one Kafka transaction, so a consumer with isolation.level=read_committed sees each
change once even across a crash of the worker.

The source: a database EOSFLOW_SOURCE_DATABASE (default `source`) in the stack's Postgres, owned by a
LOGIN REPLICATION role EOSFLOW_SOURCE_USER (default eosflow_source), made at start with the superuser.
The role's password is made once into .stack/connect/source.password (0600, a properties file); the
worker reads it through Kafka's FileConfigProvider, so connector configs say
`${file:<path>:password}` and the password is never in a config Connect stores or shows, a log line or
a command line. Postgres must run with wal_level = logical (the stack's settings file says so; a
Postgres started before that needs a restart, which this module never does itself).

`register_postgres_source` PUTs a Debezium connector (pgoutput, a slot and a publication per connector,
exactly.once.support=required, transaction.boundary=poll); `wait_running`, `status`, `delete` (which
also resets its offsets and drops its slot and publication). A slot keeps every WAL segment its
connector has not confirmed, also while the worker is stopped (`eosflow stack down`): delete connectors
that are done with, or Postgres's disk fills.

decimal.handling.mode=string: a numeric column arrives as its exact decimal text ("12.30"), which a
consumer turns into a Decimal without loss, whatever the column's scale (an unconstrained numeric too).
`precise` is exact as well, but as base64 of the unscaled bytes with the scale in the schema (or a
struct, for an unconstrained numeric); `double` loses digits.

Measured here (2 cores, 2026-11): the first fetch is 76 jars, 61 MB (25 MB of it Debezium's archive),
86 MB downloaded in 8 s from an empty ~/.m2, 4 s with Maven's own plugins cached; a start answers with
the plugin listed in 4-5 s; idle, the JVM (-Xmx384m) holds about 215 MB RSS; the initial snapshot of a
10,000-row table is read back from its topic 5 s after the connector is registered. Exactly-once source
support works: Debezium 3.6.1's PostgresConnector declares it (exactlyOnceSupport() is SUPPORTED), the
worker accepts exactly.once.support=required and runs its task as an ExactlyOnceWorkerSourceTask with a
transactional producer (transactional.id <group>-<connector>-<task>); a worker SIGKILLed while rows
stream in and started again loses and repeats none (tests/integration/test_connect_server.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eosflow.errors import StackError
from eosflow_dev.runtime import jars
from eosflow_dev.stack import process
from eosflow_dev.stack.jvm_service import JvmService
from eosflow_dev.stack.secret_files import write_secret
from eosflow_dev.stack.settings import StackSettings

START_TIMEOUT_S = 120.0
MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
"""


@dataclass(frozen=True)
class ConnectDetails:
    """What a test or a developer needs beside the worker: where it answers, where its topics are, and
    the source database (as its owner, who may make tables there)."""

    endpoint: str  # Connect's REST API
    bootstrap_servers: str  # the broker the connectors write to
    source_database: str
    source_conninfo: str = field(repr=False)  # a libpq conninfo with the password in it


class ConnectService(JvmService):
    name = "connect"
    title = "Kafka Connect"
    main = MAIN
    heap = "384m"
    start_timeout_s = START_TIMEOUT_S
    poll_s = 0.5

    def __init__(self, settings: StackSettings) -> None:
        super().__init__(settings)
        self.config = self.home / "worker.properties"
        self.log4j = self.home / "log4j2.properties"
        # A properties file (password=...), as Kafka's FileConfigProvider reads it.
        self.password_file = self.home / "source.password"

    def ports(self) -> dict[str, int]:
        return {"EOSFLOW_CONNECT_PORT": self.s.connect_port}

    def endpoint(self) -> str:
        return f"http://{self.s.kafka_host}:{self.s.connect_port}"

    def describe(self) -> str:
        return f"{self.endpoint()} group {self.s.connect_group}, source database {self.s.source_database}"

    def details(self) -> ConnectDetails:
        return ConnectDetails(
            self.endpoint(), self.s.bootstrap_servers, self.s.source_database, source_conninfo(self.s)
        )

    def plugin_path(self) -> Path:
        return jars.folder(self.s, "connect") / "plugins"

    def marker(self) -> str:
        return str(self.config)  # the worker's properties file, on the command line, names this folder

    def healthy(self, timeout: float = 3.0) -> bool:
        """The REST API answers and lists Debezium's PostgreSQL connector among its plugins."""
        try:
            plugins = _get(self.endpoint(), "/connector-plugins", timeout)
        except (OSError, ValueError, urllib.error.URLError):
            return False
        return any(p.get("class") == POSTGRES_CONNECTOR for p in plugins)

    def not_healthy(self) -> str:
        return f"Kafka Connect did not list {POSTGRES_CONNECTOR} {self.start_timeout_s:.0f}s after start"

    def jvm_args(self) -> list[str]:
        return ["-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.log4j}"]

    def main_args(self) -> list[str]:
        return [str(self.config)]

    def configure(self, log) -> None:
        self._require_broker()
        provision_source(self.s)  # before the worker: a Postgres without logical decoding is refused first
        self.config.write_text(self._worker_properties())
        self.log4j.write_text(LOG4J2)

    def ready(self, log) -> None:
        provision_source(self.s)  # again if it was running: Postgres may have been reset since (idempotent)

    def reset(self) -> None:
        """The log and the worker's files go; its state is in the broker's topics, which a stack reset
        wipes. The source password stays: the role in Postgres keeps it until Postgres is reset too."""
        for path in (self.log_path, self.config, self.log4j):
            path.unlink(missing_ok=True)

    def _require_broker(self) -> None:
        from eosflow_dev.stack.kafka import KafkaService

        # A metadata request, not the pid file: a private state folder (the tests') uses the stack's broker.
        if not self.s.kafka_bootstrap and not KafkaService(self.s).healthy():
            raise StackError(
                f"Kafka Connect needs the stack's broker ({self.s.stack_bootstrap_servers}), which is not "
                "running: `eosflow stack up --with connect` starts both"
            )

    def _worker_properties(self) -> str:
        s, group = self.s, self.s.connect_group
        return f"""\
# Written by `eosflow stack up --with connect`; edit the environment (EOSFLOW_CONNECT_*), not this file.
bootstrap.servers={s.bootstrap_servers}
group.id={group}
listeners=http://{s.kafka_host}:{s.connect_port}
rest.advertised.host.name={s.kafka_host}
rest.advertised.port={s.connect_port}
config.storage.topic={group}-configs
offset.storage.topic={group}-offsets
status.storage.topic={group}-status
# One broker: one replica; one worker: one partition is plenty.
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
offset.storage.partitions=1
status.storage.partitions=1
# KIP-618: source records and source offsets in one transaction per task.
exactly.once.source.support=enabled
key.converter={JSON_CONVERTER}
value.converter={JSON_CONVERTER}
key.converter.schemas.enable=true
value.converter.schemas.enable=true
# A folder per plugin, each with a class loader of its own. Debezium and Kafka's jars declare their
# plugins for Java's ServiceLoader, which finds them without scanning every class.
plugin.path={self.plugin_path()}
plugin.discovery=service_load
# Connector configs name secrets as ${{file:<path>:<key>}}, resolved by the worker when it starts a
# task, never stored or shown resolved; only files under this folder may be named.
config.providers=file
config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider
config.providers.file.param.allowed.paths={self.home}
# The broker does not create topics on first write: connectors say how to make theirs.
topic.creation.enable=true
"""


# -- the source database ---------------------------------------------------------------------------------
def source_password(settings: StackSettings) -> str:
    """The source role's password, made on first use into a 0600 file, refused if others can read it."""
    svc = ConnectService(settings)
    path = svc.password_file
    if not path.exists():
        svc.home.mkdir(parents=True, exist_ok=True)
        write_secret(path, f"password={secrets.token_urlsafe(24)}\n")
    found = path.lstat()
    if stat.S_ISLNK(found.st_mode) or found.st_mode & 0o077:
        raise StackError(
            f"{path} holds the source database's password but is a link or readable by others (mode "
            f"{stat.S_IMODE(found.st_mode):o}); not using it. Remove it (a new one is made at the next "
            "start of connect) or `chmod 600` it"
        )
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "password" and value.strip():
            return value.strip()
    raise StackError(f"{path} has no password= line; remove it and start connect again (a new one is made)")


def source_conninfo(settings: StackSettings) -> str:
    """A libpq conninfo for the source database as its owner (the password in it: do not log it)."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(
        host=settings.pg_host,
        port=settings.pg_port,
        dbname=settings.source_database,
        user=settings.source_user,
        password=source_password(settings),
    )


def _admin_conninfo(settings: StackSettings, dbname: str = "postgres") -> str:
    from psycopg.conninfo import make_conninfo

    from eosflow_dev.stack.postgres import SUPERUSER, PostgresService

    password_file = PostgresService(settings).superuser_password_file
    try:
        password = password_file.read_text().strip()
    except OSError:
        raise StackError(
            f"Kafka Connect's source database is made in the stack's Postgres, but its superuser password "
            f"({password_file}) cannot be read: start the stack first (`eosflow stack up --with connect`)"
        ) from None
    return make_conninfo(
        host=settings.pg_host, port=settings.pg_port, dbname=dbname, user=SUPERUSER, password=password
    )


def provision_source(settings: StackSettings) -> None:
    """Check that Postgres decodes logically, and make the source role and database; idempotent."""
    import psycopg
    from psycopg import sql

    password = source_password(settings)
    try:
        conn = psycopg.connect(_admin_conninfo(settings), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise StackError(
            f"Kafka Connect needs the stack's Postgres on {settings.pg_host}:{settings.pg_port}, which did "
            f"not answer ({str(exc).strip().splitlines()[0]}): `eosflow stack up --with connect` starts both"
        ) from None
    with conn:
        wal_level = conn.execute("show wal_level").fetchone()[0]
        if wal_level != "logical":
            raise StackError(
                f"the stack's Postgres on {settings.pg_host}:{settings.pg_port} runs with wal_level = "
                f"{wal_level}; Debezium needs logical, which Postgres reads only when it starts (its "
                "settings file says logical since the connect service came). Restart it: "
                "`eosflow stack down && eosflow stack up --with connect`"
            )
        role = sql.Identifier(settings.source_user)
        exists = conn.execute("select 1 from pg_roles where rolname = %s", (settings.source_user,)).fetchone()
        conn.execute(
            sql.SQL("{} role {} login replication nosuperuser password {}").format(
                sql.SQL("alter") if exists else sql.SQL("create"), role, sql.Literal(password)
            )
        )
        if not conn.execute(
            "select 1 from pg_database where datname = %s", (settings.source_database,)
        ).fetchone():
            conn.execute(
                sql.SQL("create database {} owner {}").format(sql.Identifier(settings.source_database), role)
            )


# -- connectors ------------------------------------------------------------------------------------------
def slot_name(name: str) -> str:
    """The replication slot (and publication) of connector `name`: Postgres allows [a-z0-9_] and 63
    characters in a slot's name, so the connector's name is folded into that, with a digest of the real
    name so two names that fold alike do not share a slot."""
    folded = re.sub(r"[^a-z0-9_]", "_", name.lower())[:40]
    return f"eosflow_{folded}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def postgres_source_config(
    settings: StackSettings,
    tables: list[str],
    topic_prefix: str,
    *,
    slot: str,
    exactly_once: bool = True,
    schemas: bool = True,
) -> dict[str, str]:
    """Debezium's PostgreSQL connector config for `tables` ("schema.table", or "table" in public)."""
    if not tables:
        raise StackError("a Debezium source needs at least one table to stream")
    qualified = [table if "." in table else f"public.{table}" for table in tables]
    password = ConnectService(settings).password_file
    config = {
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": "1",  # Debezium's PostgreSQL connector runs one task whatever this says
        "plugin.name": "pgoutput",  # Postgres's own decoder: nothing to install in the server
        "database.hostname": settings.pg_host,
        "database.port": str(settings.pg_port),
        "database.user": settings.source_user,
        "database.password": f"${{file:{password}:password}}",  # resolved by the worker, never stored
        "database.dbname": settings.source_database,
        "topic.prefix": topic_prefix,
        # include lists are regular expressions: a dot in a name is a dot
        "table.include.list": ",".join(re.escape(table) for table in qualified),
        "slot.name": slot,
        "publication.name": slot,
        "publication.autocreate.mode": "filtered",  # a publication of exactly these tables
        "snapshot.mode": "initial",
        # a numeric arrives as its exact decimal text (see the module's docstring)
        "decimal.handling.mode": "string",
        # each field's source column type in the schema block: a numeric's precision and scale, which a
        # database entry's discovery declares (docs/DESIGN.md, "A whole database in one declaration")
        "column.propagate.source.type": ".*",
        "tombstones.on.delete": "true",
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": str(schemas).lower(),
        "value.converter.schemas.enable": str(schemas).lower(),
        # the broker does not create topics on first write
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
    }
    if exactly_once:
        # refused at registration unless the connector declares exactly-once support (KIP-618); a
        # transaction per poll: Debezium defines no boundaries of its own
        config["exactly.once.support"] = "required"
        config["transaction.boundary"] = "poll"
    return config


def register_postgres_source(
    settings: StackSettings,
    name: str,
    tables: list[str],
    topic_prefix: str,
    *,
    exactly_once: bool = True,
    schemas: bool = True,
) -> None:
    """Create or update Debezium connector `name`, streaming `tables` of the source database into
    topics <topic_prefix>.<schema>.<table>. `exactly_once`: require KIP-618 exactly-once support
    (False: run without requiring it; the worker still writes each task's batches transactionally).
    `schemas`: the JSON converters' schemas.enable, keys and values alike."""
    config = postgres_source_config(
        settings, tables, topic_prefix, slot=slot_name(name), exactly_once=exactly_once, schemas=schemas
    )
    endpoint = ConnectService(settings).endpoint()
    status, answer = _call(endpoint, "PUT", f"/connectors/{_quote(name)}/config", config)
    if status not in (200, 201):
        raise StackError(
            f"Kafka Connect refused connector {name!r} (HTTP {status}): {_message(answer)}"
            + (
                " (exactly_once=False registers it without requiring exactly-once support)"
                if exactly_once and "exactly" in _message(answer).lower()
                else ""
            )
        )


def status(settings: StackSettings, name: str) -> dict[str, Any]:
    """Connect's GET /connectors/<name>/status: the connector's and each task's state (and trace)."""
    code, answer = _call(ConnectService(settings).endpoint(), "GET", f"/connectors/{_quote(name)}/status")
    if code != 200:
        raise StackError(f"no status for connector {name!r} (HTTP {code}): {_message(answer)}")
    return answer


def wait_running(settings: StackSettings, name: str, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the connector and all its tasks run; a failed one is an error with Connect's trace."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while True:
        try:
            last = status(settings, name)
        except StackError:
            last = {}  # just registered: the status topic has not caught up yet
        states = [last.get("connector", {}), *last.get("tasks", [])]
        failed = [s for s in states if s.get("state") == "FAILED"]
        if failed:
            raise StackError(f"connector {name!r} failed: {_reason(failed[0].get('trace', '(no trace)'))}")
        if last.get("tasks") and all(s.get("state") == "RUNNING" for s in states):
            return last
        if time.monotonic() >= deadline:
            raise StackError(
                f"connector {name!r} was not running {timeout:.0f}s after it was asked for: "
                f"{json.dumps(last)}"
            )
        time.sleep(0.25)


def _reason(trace: str) -> str:
    """A Java stack trace without its frames: the exception and each cause, one line each."""
    lines = [line.strip() for line in trace.splitlines()]
    return "\n".join(line for line in lines if line and not line.startswith(("at ", "...")))


def delete(settings: StackSettings, name: str, timeout: float = 60.0) -> None:
    """Stop connector `name`, reset its offsets, delete it, and drop its replication slot and
    publication: registering the name again starts with a new snapshot. Idempotent."""
    endpoint = ConnectService(settings).endpoint()
    path = f"/connectors/{_quote(name)}"
    code, answer = _call(endpoint, "PUT", f"{path}/stop")
    if code not in (202, 204, 404):
        raise StackError(f"Kafka Connect could not stop connector {name!r} (HTTP {code}): {_message(answer)}")
    if code != 404:
        stopped = process.wait_until(
            lambda: status(settings, name).get("connector", {}).get("state") == "STOPPED", timeout, 0.25
        )
        if not stopped:
            raise StackError(
                f"connector {name!r} did not stop within {timeout:.0f}s: {status(settings, name)}"
            )
        # KIP-875: a stopped connector's offsets can be reset, so the name starts afresh if it comes back
        code, answer = _call(endpoint, "DELETE", f"{path}/offsets")
        if code != 200:
            raise StackError(
                f"could not reset connector {name!r}'s offsets (HTTP {code}): {_message(answer)}"
            )
        code, answer = _call(endpoint, "DELETE", path)
        if code not in (200, 204, 404):
            raise StackError(
                f"Kafka Connect could not delete connector {name!r} (HTTP {code}): {_message(answer)}"
            )
        # the deletion goes through the config topic: gone once the worker has read it back
        if not process.wait_until(lambda: _call(endpoint, "GET", path)[0] == 404, timeout, 0.25):
            raise StackError(f"connector {name!r} was still there {timeout:.0f}s after it was deleted")
    _drop_slot(settings, slot_name(name), timeout)


def _drop_slot(settings: StackSettings, slot: str, timeout: float) -> None:
    """The connector's slot (once no task holds it: an active slot cannot be dropped) and publication."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(_admin_conninfo(settings, settings.source_database), autocommit=True) as conn:

        def released() -> bool:
            row = conn.execute(
                "select active from pg_replication_slots where slot_name = %s", (slot,)
            ).fetchone()
            return row is None or not row[0]

        if not process.wait_until(released, timeout, 0.25):
            raise StackError(
                f"replication slot {slot} is still in use {timeout:.0f}s after its connector stopped"
            )
        if conn.execute("select 1 from pg_replication_slots where slot_name = %s", (slot,)).fetchone():
            conn.execute("select pg_drop_replication_slot(%s)", (slot,))
        conn.execute(sql.SQL("drop publication if exists {}").format(sql.Identifier(slot)))


# -- Connect's REST API ----------------------------------------------------------------------------------
def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _get(endpoint: str, path: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(f"{endpoint}{path}", timeout=timeout) as answer:
        return json.load(answer)


def _call(endpoint: str, method: str, path: str, body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
    """(HTTP status, the answer's JSON or None); an HTTP error is an answer, not an exception."""
    request = urllib.request.Request(
        f"{endpoint}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, raw.decode(errors="replace")
    except (OSError, urllib.error.URLError) as exc:
        raise StackError(
            f"Kafka Connect on {endpoint} did not answer {method} {path} ({exc}): is it running? "
            "`eosflow stack up --with connect`"
        ) from None


def _message(answer: Any) -> str:
    if isinstance(answer, dict):
        return str(answer.get("message", answer))
    return str(answer)
