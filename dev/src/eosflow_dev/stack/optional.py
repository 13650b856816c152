"""The stack's optional servers: started only when asked, stopped by every `eosflow stack down`.

`iceberg-rest` (Iceberg's REST catalog, eosflow_dev.stack.iceberg_rest), `s3` (S3Proxy,
eosflow_dev.stack.s3_server), `connect` (Kafka Connect with Debezium's PostgreSQL connector,
eosflow_dev.stack.connect, which also registers connectors) and `spark-connect` (Spark's own Spark Connect
server, eosflow_dev.stack.spark_connect: the warm Spark; `spark-connect-isolating`, Spark's own isolating
server, for the tests of the path that ships a run's code). Asked for with
`eosflow stack up --with iceberg-rest --with s3` (or a comma list), or EOSFLOW_STACK_WITH, which `up`
reads too. Their jars are fetched the first time one starts (or by `eosflow stack fetch --with ...`), so
`make setup` and a bare `eosflow stack up` never pay for them.

Code and tests reach them through `ensure` (start if not running, return the endpoint), `iceberg_rest`
(the same, with the catalog's warehouse), `s3` (the same, with the S3 details: endpoint, region,
bucket, access key, secret) and `connect` (the same, with the source database). The pytest fixtures
`iceberg_rest`, `s3_server` and `connect_server` (tests/stack_servers.py) call them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from eosflow.errors import StackError
from eosflow_dev.stack.connect import ConnectDetails, ConnectService
from eosflow_dev.stack.iceberg_rest import IcebergRestService
from eosflow_dev.stack.s3_server import S3Details, S3Service
from eosflow_dev.stack.settings import StackSettings
from eosflow_dev.stack.spark_connect import IsolatingSparkConnectService, SparkConnectService

# In start order: the REST catalog may keep its warehouse in the S3 server.
NAMES = ("s3", "iceberg-rest", "connect", "spark-connect", "spark-connect-isolating")
# pyspark's own jars: nothing for `eosflow stack fetch` to fetch
WITHOUT_JARS = ("spark-connect", "spark-connect-isolating")
WITH_ENV = "EOSFLOW_STACK_WITH"

OptionalService = IcebergRestService | S3Service | ConnectService | SparkConnectService  # or its subclass


def service(settings: StackSettings, name: str) -> OptionalService:
    if name == "s3":
        return S3Service(settings)
    if name == "iceberg-rest":
        return IcebergRestService(settings)
    if name == "connect":
        return ConnectService(settings)
    if name == "spark-connect":
        return SparkConnectService(settings)
    if name == "spark-connect-isolating":
        return IsolatingSparkConnectService(settings)
    raise StackError(f"no optional stack service {name!r}: choose from {', '.join(NAMES)}")


def services(settings: StackSettings) -> list[OptionalService]:
    return [service(settings, name) for name in NAMES]


def requested(asked: Iterable[str] = ()) -> list[str]:
    """The optional services asked for (each --with value, comma lists too, and EOSFLOW_STACK_WITH),
    in start order; an unknown name is an error that lists the known ones."""
    words = [*asked, os.environ.get(WITH_ENV, "")]
    names = {part.strip() for word in words for part in word.split(",") if part.strip()}
    unknown = sorted(names - set(NAMES))
    if unknown:
        raise StackError(
            f"no optional stack service {', '.join(unknown)} (from --with or {WITH_ENV}): "
            f"choose from {', '.join(NAMES)}"
        )
    return [name for name in NAMES if name in names]


def ensure(settings: StackSettings, name: str, log=print) -> str:
    """Start one optional service unless it runs (fetching its jars the first time); its endpoint."""
    svc = service(settings, name)
    svc.start(log=log)
    return svc.endpoint()


@dataclass(frozen=True)
class IcebergRestDetails:
    uri: str  # PyIceberg's `uri` for `type: rest`
    warehouse: str  # where the server writes new tables: file:///... or s3://bucket/iceberg-rest


def iceberg_rest(settings: StackSettings, log=print) -> IcebergRestDetails:
    """The stack's Iceberg REST catalog, started if needed (and the S3 server first, when it keeps its
    warehouse there)."""
    svc = IcebergRestService(settings)
    svc.start(log=log)
    return IcebergRestDetails(svc.endpoint(), svc.warehouse())


def s3(settings: StackSettings, log=print) -> S3Details:
    """The stack's S3 server, started if needed: endpoint, region, bucket and credentials."""
    svc = S3Service(settings)
    svc.start(log=log)
    return svc.details()


def connect(settings: StackSettings, log=print) -> ConnectDetails:
    """The stack's Kafka Connect worker with Debezium, started if needed (its source database made): its
    REST endpoint, the broker, the source database's conninfo. Register connectors with
    eosflow_dev.stack.connect.register_postgres_source."""
    svc = ConnectService(settings)
    svc.start(log=log)
    return svc.details()


def spark_connect(settings: StackSettings, log=print) -> str:
    """The stack's Spark Connect server, started if needed: the URL EOSFLOW_SPARK_REMOTE takes."""
    svc = SparkConnectService(settings)
    svc.start(log=log)
    return svc.endpoint()
