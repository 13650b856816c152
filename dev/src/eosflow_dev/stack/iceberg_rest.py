"""Apache Iceberg's own REST catalog server for the stack, started only when asked
(`eosflow stack up --with iceberg-rest`).

org.apache.iceberg.rest.RESTCatalogServer 1.10.0, the server Iceberg's docker/iceberg-rest-fixture image
runs, from Maven Central (infra/maven/iceberg-rest/pom.xml). Behind it a JDBC catalog in a sqlite file,
.stack/iceberg-rest/catalog.db, so a restart keeps every namespace and table. Its warehouse
(EOSFLOW_ICEBERG_REST_STORAGE): `file` (default), file://<state dir>/iceberg-rest/warehouse; or `s3`,
s3://<EOSFLOW_S3_BUCKET>/iceberg-rest in the stack's S3 server (started first), written with S3FileIO,
path-style. The server is configured the fixture's way, CATALOG_* environment variables; the S3
credentials go as AWS_* variables, which the AWS SDK reads and the server does not log (it logs its
catalog properties at start).

Clients: PyIceberg's `type: rest`, `uri: http://127.0.0.1:18181` (EOSFLOW_ICEBERG_REST_PORT). It has no
authentication, and Jetty listens on every interface (the server takes a port, no host): on a shared
machine, firewall the port.

Measured here (2 cores, 2026-11): the first fetch is 71 jars, 123 MB (63 MB of it iceberg-aws-bundle,
the AWS SDK), 7 s with Maven's own plugins cached, 14 s from an empty ~/.m2; a start answers /v1/config
in about 1.5 s; idle, the JVM (-Xmx256m) holds about 115 MB RSS.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request

from eosflow.errors import StackError
from eosflow_dev.stack.jvm_service import JvmService
from eosflow_dev.stack.settings import StackSettings

START_TIMEOUT_S = 60.0
MAIN = "org.apache.iceberg.rest.RESTCatalogServer"
STORAGES = ("file", "s3")


class IcebergRestService(JvmService):
    name = "iceberg-rest"
    title = "the Iceberg REST catalog"
    main = MAIN
    heap = "256m"
    start_timeout_s = START_TIMEOUT_S

    def __init__(self, settings: StackSettings) -> None:
        super().__init__(settings)
        self.catalog_db = self.home / "catalog.db"
        self.warehouse_dir = self.home / "warehouse"

    def ports(self) -> dict[str, int]:
        return {"EOSFLOW_ICEBERG_REST_PORT": self.s.iceberg_rest_port}

    def endpoint(self) -> str:
        """The catalog's URI, as PyIceberg's `uri` takes it."""
        return f"http://{self.s.kafka_host}:{self.s.iceberg_rest_port}"

    def describe(self) -> str:
        return f"{self.endpoint()} warehouse {self.warehouse()}"

    def warehouse(self) -> str:
        if self._storage() == "s3":
            return f"s3://{self.s.s3_bucket}/iceberg-rest"
        return self.warehouse_dir.as_uri()

    def marker(self) -> str:
        return f"-Deosflow.state={self.home}"  # the server takes no file argument: a marker names the folder

    def jvm_args(self) -> list[str]:
        return [self.marker()]

    def healthy(self, timeout: float = 3.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint()}/v1/config", timeout=timeout) as answer:
                return answer.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def prepare(self, log=print) -> None:
        self._storage()
        super().prepare(log=log)

    def configure(self, log) -> dict[str, str]:
        self.warehouse_dir.mkdir(exist_ok=True)
        log(f"the Iceberg REST catalog's warehouse: {self.warehouse()}")
        return self._environment(log)

    def reset(self) -> None:
        """The catalog and its file warehouse go (tables it kept in the S3 server stay there)."""
        shutil.rmtree(self.home, ignore_errors=True)

    def _storage(self) -> str:
        storage = self.s.iceberg_rest_storage
        if storage not in STORAGES:
            raise StackError(
                f"EOSFLOW_ICEBERG_REST_STORAGE={storage!r} is not one of {', '.join(STORAGES)}: `file` keeps "
                "the REST catalog's tables in .stack/iceberg-rest/warehouse, `s3` in the stack's S3 server"
            )
        return storage

    def _environment(self, log) -> dict[str, str]:
        """The server's configuration, the fixture's CATALOG_* way (`__` is `-`, `_` is `.`). Inherited
        CATALOG_* and AWS_* variables are dropped: only what is set here configures it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "AWS_"))}
        env.update(
            CATALOG_CATALOG__IMPL="org.apache.iceberg.jdbc.JdbcCatalog",
            CATALOG_URI=f"jdbc:sqlite:{self.catalog_db}",
            # sqlite ignores them; the JDBC catalog wants a user and password to be set
            CATALOG_JDBC_USER="eosflow",
            CATALOG_JDBC_PASSWORD="eosflow",
            CATALOG_JDBC_STRICT__MODE="true",
            CATALOG_WAREHOUSE=self.warehouse(),
            CATALOG_REST_PORT=str(self.s.iceberg_rest_port),
        )
        if self._storage() == "s3":
            from eosflow_dev.stack.s3_server import S3Service

            s3 = S3Service(self.s)
            s3.start(log=log)
            details = s3.details()
            env.update(
                CATALOG_IO__IMPL="org.apache.iceberg.aws.s3.S3FileIO",
                CATALOG_S3_ENDPOINT=details.endpoint,
                CATALOG_S3_PATH__STYLE__ACCESS="true",
                CATALOG_CLIENT_REGION=details.region,
                AWS_REGION=details.region,
                AWS_ACCESS_KEY_ID=details.access_key,
                AWS_SECRET_ACCESS_KEY=details.secret_key,
            )
        return env
