"""The local stack: Kafka and Postgres started from the project's own files, and the Spark jars.

`up` is idempotent and waits for real health; `down` stops only what `up` started (found through
pid files and data folders that are ours). The optional servers (eosflow_dev.stack.optional: an Iceberg REST
catalog, an S3 server, Kafka Connect with Debezium) start only when asked (`with`), and every `down`
stops them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass

from eosflow.errors import StackError
from eosflow_dev.runtime import jars
from eosflow_dev.stack import optional, process
from eosflow_dev.stack.kafka import KafkaService
from eosflow_dev.stack.postgres import PostgresService
from eosflow_dev.stack.registry import RegistryService
from eosflow_dev.stack.settings import StackSettings

__all__ = ["StackError", "services", "up", "down", "status", "reset", "fetch", "ServiceStatus"]


def services(settings: StackSettings) -> list[KafkaService | PostgresService | RegistryService]:
    todo = [KafkaService(settings), PostgresService(settings)]
    # The schema registry, for Avro pipelines; EOSFLOW_REGISTRY_PORT=0 leaves it out (the lab's stacks).
    return todo + [RegistryService(settings)] if settings.registry_port else todo


def fetch(
    settings: StackSettings,
    log=print,
    update_lock: bool = False,
    with_: Iterable[str] = (),
    spark_archive: bool = False,
) -> None:
    """The Maven jars (the broker's, Spark's connector + JDBC driver, and those of the optional servers
    asked for), each checked against infra/jars.sha256 (`update_lock`: fetched afresh and recorded
    there); `spark_archive`: then Spark's class-data-sharing archive (eosflow.spark.cds), which only a
    Spark session uses: the demo's small plans never start one, the tests and the bench do."""
    fetched = [name for name in optional.requested(with_) if name not in optional.WITHOUT_JARS]
    for name in [*jars.CLASSPATHS, *fetched]:
        jars.fetch(settings, name, log=log, update_lock=update_lock)
    if spark_archive:
        from eosflow.spark import cds

        cds.record(settings, log=log)


def up(settings: StackSettings, log=print, with_: Iterable[str] = ()) -> None:
    """Start the stack, and the optional servers named in `with_` or EOSFLOW_STACK_WITH."""
    extra = [optional.service(settings, name) for name in optional.requested(with_)]
    todo = [*services(settings), *extra]
    for svc in todo:
        svc.prepare(log=log)
    fetch(settings, log=log)
    # Check every port before starting anything, so a busy port never leaves half a stack behind.
    for svc in todo:
        if svc.pid() is None:
            process.require_free_ports(svc.name, settings.kafka_host, svc.ports())
    for svc in todo:
        svc.start(log=log)


def down(settings: StackSettings, log=print) -> None:
    """Stop the stack, and every optional server that runs, asked for or not."""
    for svc in reversed([*services(settings), *optional.services(settings)]):
        svc.stop(log=log)


def reset(settings: StackSettings, log=print) -> None:
    """Stop, then wipe Kafka's log and the warehouse (and the optional servers' catalog and buckets; the
    S3 credentials stay); the jar cache stays."""
    down(settings, log=log)
    for svc in [*services(settings), *optional.services(settings)]:
        svc.reset()
    from eosflow.ledger.migrate import forget

    forget()
    shutil.rmtree(settings.state_dir / "manifests", ignore_errors=True)
    log("stack reset: kafka storage and the warehouse are gone; `eosflow stack up` starts afresh")


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    pid: int | None
    healthy: bool
    endpoint: str
    optional: bool = False  # started only when asked: not running is "not started", and fine

    @property
    def ok(self) -> bool:
        return self.healthy or (self.optional and self.pid is None)

    @property
    def state(self) -> str:
        if self.pid is None:
            return "not started" if self.optional else "stopped"
        return "healthy" if self.healthy else "running, not answering"


def status(settings: StackSettings) -> list[ServiceStatus]:
    out = []
    for svc in services(settings):
        pid = svc.pid()
        out.append(ServiceStatus(svc.name, pid, pid is not None and svc.healthy(), svc.endpoint()))
    for extra in optional.services(settings):
        pid = extra.pid()
        healthy = pid is not None and extra.healthy()
        out.append(ServiceStatus(extra.name, pid, healthy, extra.describe(), optional=True))
    return out
