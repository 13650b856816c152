"""An S3-compatible server for the stack, started only when asked (`eosflow stack up --with s3`).

S3Proxy 4.1 (Apache-2.0; infra/maven/s3/pom.xml) with its `filesystem` backend: each bucket is a folder
under .stack/s3/data, so a restart keeps every object. It checks AWS signatures (v2 or v4), path-style
addressing, on EOSFLOW_S3_PORT (default 19000), bound to the stack's host only. The access key and a
random secret are made on first start into .stack/s3/credentials (0600, `secret_files`); S3Proxy reads
them from its properties file, also 0600 and rewritten at each start, never from its command line.
The bucket EOSFLOW_S3_BUCKET (default `eosflow`) is made at start by a signed request, which also proves
the credentials work.

Measured here (2 cores, 2026-11): the first fetch is 152 jars, 57 MB (S3Proxy declares every cloud
backend it supports as a dependency), 9 s with Maven's own plugins cached, 20 s from an empty ~/.m2; a
start answers in about 3 s, bucket made; idle, the JVM (-Xmx256m) holds about 150 MB RSS.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from eosflow.errors import StackError
from eosflow_dev.stack.jvm_service import JvmService
from eosflow_dev.stack.secret_files import write_secret
from eosflow_dev.stack.settings import StackSettings

START_TIMEOUT_S = 60.0
REGION = "us-east-1"  # S3Proxy accepts any region in a v4 signature; clients need one to sign with
ACCESS_KEY = "eosflow"
MAIN = "org.gaul.s3proxy.Main"

# S3Proxy ships no logging configuration, so logback's default logs every request at DEBUG.
_LOGBACK = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
"""


@dataclass(frozen=True)
class S3Details:
    """What a client needs to reach the stack's S3 server: path-style addressing, plain HTTP."""

    endpoint: str  # http://host:port
    region: str
    bucket: str
    access_key: str
    secret_key: str = field(repr=False)


class S3Service(JvmService):
    name = "s3"
    title = "the S3 server"
    main = MAIN
    heap = "256m"
    start_timeout_s = START_TIMEOUT_S

    def __init__(self, settings: StackSettings) -> None:
        super().__init__(settings)
        self.data = self.home / "data"
        self.credentials_file = self.home / "credentials"
        self.properties_file = self.home / "s3proxy.properties"
        self.logback_file = self.home / "logback.xml"

    def ports(self) -> dict[str, int]:
        return {"EOSFLOW_S3_PORT": self.s.s3_port}

    def endpoint(self) -> str:
        return f"http://{self.s.kafka_host}:{self.s.s3_port}"

    def describe(self) -> str:
        """For `eosflow stack status`: where, and which bucket; never the secret."""
        return f"{self.endpoint()} bucket {self.s.s3_bucket}"

    def marker(self) -> str:
        return str(self.properties_file)  # on the command line, and it names this state folder

    def healthy(self, timeout: float = 3.0) -> bool:
        """S3Proxy's own /healthz (unsigned); a start also makes a signed request (ready)."""
        try:
            with urllib.request.urlopen(f"{self.endpoint()}/healthz", timeout=timeout) as answer:
                return answer.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def details(self) -> S3Details:
        access_key, secret_key = self._credentials()
        return S3Details(self.endpoint(), REGION, self.s.s3_bucket, access_key, secret_key)

    def jvm_args(self) -> list[str]:
        return [f"-Dlogback.configurationFile={self.logback_file}"]

    def main_args(self) -> list[str]:
        return ["--properties", str(self.properties_file)]

    def configure(self, log) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        access_key, secret_key = self._credentials()
        write_secret(self.properties_file, self._properties(access_key, secret_key))
        self.logback_file.write_text(_LOGBACK)

    def ready(self, log) -> None:
        self._ensure_bucket()  # it may have started before a bucket of this name was asked for

    def reset(self) -> None:
        """Every bucket and object goes; the credentials stay, so clients configured with them still work."""
        shutil.rmtree(self.data, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)

    def _properties(self, access_key: str, secret_key: str) -> str:
        return "\n".join(
            [
                f"s3proxy.endpoint={self.endpoint()}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={access_key}",
                f"s3proxy.credential={secret_key}",
                "jclouds.provider=filesystem",
                f"jclouds.filesystem.basedir={self.data}",
                "",
            ]
        )

    def _credentials(self) -> tuple[str, str]:
        """The access key and secret, made on first use into a 0600 file, refused if others can read it."""
        if not self.credentials_file.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            made = {"access_key": ACCESS_KEY, "secret_key": secrets.token_urlsafe(32)}
            write_secret(self.credentials_file, json.dumps(made) + "\n")
        found = os.lstat(self.credentials_file)
        if stat.S_ISLNK(found.st_mode) or found.st_mode & 0o077:
            raise StackError(
                f"{self.credentials_file} holds the S3 server's secret but is a link or readable by others "
                f"(mode {stat.S_IMODE(found.st_mode):o}); not using it. Remove it (a new secret is made at "
                "the next start) or `chmod 600` it"
            )
        try:
            saved = json.loads(self.credentials_file.read_text())
            return str(saved["access_key"]), str(saved["secret_key"])
        except (ValueError, KeyError, TypeError):
            raise StackError(
                f"{self.credentials_file} is not the S3 credentials eosflow writes; remove it and start "
                "the S3 server again (a new secret is made)"
            ) from None

    def _ensure_bucket(self) -> None:
        """Make the bucket if missing, by a signed request: a wrong secret fails here, not in a client."""
        from pyarrow import fs as pafs

        s3 = filesystem(self.details(), allow_bucket_creation=True)
        try:
            if s3.get_file_info(self.s.s3_bucket).type == pafs.FileType.NotFound:
                s3.create_dir(self.s.s3_bucket)
        except OSError as exc:
            raise StackError(
                f"the S3 server on {self.endpoint()} refused eosflow's own signed request ({exc}). "
                f"If {self.credentials_file} changed since the server started, `eosflow stack down` and "
                f"start it again. See {self.log_path}"
            ) from None


def filesystem(details: S3Details, **options):
    """A pyarrow S3FileSystem signed with the stack server's credentials (path-style, plain HTTP);
    `options`: more of S3FileSystem's (allow_bucket_creation, ...)."""
    from pyarrow import fs as pafs

    scheme, _, address = details.endpoint.partition("://")
    return pafs.S3FileSystem(
        access_key=details.access_key,
        secret_key=details.secret_key,
        endpoint_override=address,
        scheme=scheme,
        region=details.region,
        force_virtual_addressing=False,
        **options,
    )
