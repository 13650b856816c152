"""A reader of eosflow's Iceberg tables that is not PyIceberg: Apache Spark with Iceberg's Spark runtime.

A dev tool for the tests (eosflow itself never imports it). The project's own pyspark (4.3.0) cannot load
Iceberg's newest Spark runtime (1.12.0 is built for Spark 4.1, and fails on 4.3 with
IncompatibleClassChangeError on SparkView), so the reader is a Python of its own: a virtualenv under the
state folder (.stack/readers/spark-4.1/venv) with pyspark 4.1.1 from reader-requirements.txt (pinned, with
hashes), and the jars of infra/maven/iceberg-reader/pom.xml (strict checksums, SHA-256 in
infra/jars.sha256), both made on first use and kept.

    reader = ensure_reader(settings)
    with reader.session() as spark:
        got = spark.read(jdbc_catalog(settings), "lake.orders")  # got.rows: a pyarrow.Table
        got = spark.read(from_pyiceberg(pyiceberg_properties), "lake.orders", catalog_name="...")

Any catalog Iceberg's Spark runtime knows (jdbc, rest, ...): each property passes through as
spark.sql.catalog.<name>.<key>; from_pyiceberg renames the few PyIceberg names Java spells otherwise.

A session is one Spark process (tests/interop/spark_read.py under the reader's Python) that reads as many
tables as it is asked, Spark started once:

    with reader.session() as spark:
        first = spark.read(jdbc_catalog(settings), "lake.orders")
        later = spark.read(jdbc_catalog(settings), "lake.orders")  # nothing cached from the first

The catalog properties reach it on standard input, never on a command line or in its environment.

    python -m tests.interop.spark_iceberg --install       # make the reader now (CI, a cold machine)
    python -m tests.interop.spark_iceberg --update-lock   # after changing the POM: record the new jars
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import quote, unquote

import pyarrow as pa

from eosflow.errors import StackError
from eosflow.settings import Settings
from eosflow_dev.runtime import jars

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "reader-requirements.txt"
SCRIPT = HERE / "spark_read.py"
PYSPARK = "4.1.1"
ICEBERG = "1.12.0"
JARS = "iceberg-reader"  # infra/maven/iceberg-reader/pom.xml
RUNTIME_JAR = f"iceberg-spark-runtime-4.1_2.13-{ICEBERG}.jar"
# What one install took here (2 cores): pyspark 4.1.1 is a 455 MB sdist built into a wheel locally;
# pip's wheel cache makes the next install about 6 s.
INSTALL_SECONDS = 40
READ_TIMEOUT_S = 300
# Property keys whose values are secrets: never shown in an error.
# (Iceberg's and PyIceberg's names: jdbc.password, credential, token, s3.secret-access-key, ...)
_SECRET_KEY = re.compile(r"(?i)password|secret|token|credential|key")


class ReaderError(RuntimeError):
    """The Spark reader could not be made, or a read failed; the message says what and what to do."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid  # the read's process, leader of its group (Spark's JVM is in it), when one ran


@dataclass(frozen=True)
class SparkRead:
    """What Spark read: the rows, Spark's own count(*), and the table's snapshots (oldest first)."""

    rows: pa.Table = field(repr=False)
    count: int
    snapshots: list[dict]
    spark_version: str
    iceberg_version: str
    start_seconds: float  # the Spark session's start, in the child
    read_seconds: float  # the SELECT, written out as Parquet
    seconds: float  # the whole read, the child's Python and JVM included


@dataclass(frozen=True)
class Reader:
    python: Path
    jars: list[Path] = field(repr=False)

    @contextmanager
    def session(self) -> Iterator[ReaderSession]:
        """One Spark process for many reads (Spark starts once: about 10 s of a read's 15 on 2 cores).
        Ended, its JVM with it, when the block ends."""
        with tempfile.TemporaryDirectory(prefix="eosflow-spark-reader-") as scratch:
            session = ReaderSession(self, Path(scratch))
            try:
                yield session
            finally:
                session.close()


class ReaderSession:
    """A running reader: a child Python (spark_read.py) whose Spark session reads one table per request.
    Requests go to its standard input; answers come back on its standard output, one JSON line each."""

    def __init__(self, reader: Reader, scratch: Path) -> None:
        self.scratch = scratch
        # A session of its own: a read that hangs is ended whole, Spark's JVM with it, by group id.
        self.child = subprocess.Popen(
            [str(reader.python), str(SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(),
            cwd=scratch,
            start_new_session=True,
        )
        # Its standard error is read all along (a full pipe would stop it); the last lines are kept.
        self._stderr: deque[str] = deque(maxlen=400)
        self._answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(
            target=self._drain, args=(self.child.stderr, self._stderr.append), daemon=True
        ).start()
        threading.Thread(target=self._drain, args=(self.child.stdout, self._answers.put), daemon=True).start()
        self._send({"jars": [str(j) for j in reader.jars], "scratch": str(scratch), "driver_memory": "512m"})
        self._reads = 0

    @staticmethod
    def _drain(stream: IO[str], put: Callable) -> None:
        for line in stream:
            put(line)
        put(None)  # the end: the child closed it (exited)

    def _send(self, request: dict) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write(json.dumps(request) + "\n")
        self.child.stdin.flush()

    def read(
        self,
        catalog: dict[str, str],
        table: str,
        columns: list[str] | None = None,
        catalog_name: str = "eosflow",
    ) -> SparkRead:
        """`table` ("namespace.name") of the Iceberg catalog `catalog` (Iceberg catalog properties: type,
        uri, warehouse, io-impl, ...; each becomes spark.sql.catalog.<catalog_name>.<key>). A JDBC
        catalog's `catalog_name` must be the name the writer used: it keys the catalog's rows. Within
        READ_TIMEOUT_S (Spark's start included, for a session's first read), else the session is ended."""
        started = time.monotonic()
        self._reads += 1
        out = self.scratch / f"read-{self._reads}"
        try:
            self._send(
                {"catalog_name": catalog_name, "properties": catalog, "table": table, "columns": columns,
                 "out": str(out)}
            )  # fmt: skip
        except (BrokenPipeError, ValueError):
            raise self._ended(table, catalog) from None
        try:
            line = self._answers.get(timeout=READ_TIMEOUT_S)
        except queue.Empty:
            self.close(kill=True)
            raise ReaderError(
                f"Spark did not read {table} within {READ_TIMEOUT_S} s (ended); its last lines:\n"
                f"{_tail(self._stderr_text(), catalog)}",
                pid=self.child.pid,
            ) from None
        if line is None:
            raise self._ended(table, catalog)
        answer = json.loads(line)
        if "error" in answer:
            raise ReaderError(
                f"Spark could not read {table} from catalog {catalog_name}; its last words (secret values "
                f"shown as ***):\n{_tail(answer['error'], catalog)}",
                pid=self.child.pid,
            )
        import pyarrow.parquet as pq

        return SparkRead(
            rows=pq.read_table(out / "rows"),
            count=answer["count"],
            snapshots=answer["snapshots"],
            spark_version=answer["spark_version"],
            iceberg_version=answer["iceberg_version"],
            start_seconds=answer["start_seconds"],
            read_seconds=answer["read_seconds"],
            seconds=round(time.monotonic() - started, 2),
        )

    def _ended(self, table: str, catalog: dict[str, str]) -> ReaderError:
        code = self.child.wait(timeout=30)
        return ReaderError(
            f"Spark could not read {table}: the reader's process had ended (exit {code}); its last lines "
            f"(secret values shown as ***):\n{_tail(self._stderr_text(), catalog)}",
            pid=self.child.pid,
        )

    def _stderr_text(self) -> str:
        # _drain ends the lines with None once the child closed the stream (a killed reader's, at once)
        return "".join(line for line in self._stderr if line is not None)

    def close(self, kill: bool = False) -> None:
        """Standard input closed: Spark stops and the child exits; past 30 s (or at once, `kill`), its
        process group is killed."""
        if self.child.poll() is None and not kill:
            try:
                self.child.stdin.close()  # type: ignore[union-attr]
                self.child.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        with suppress(ProcessLookupError):
            os.killpg(self.child.pid, signal.SIGKILL)  # whatever of its group is left (Spark's JVM)
        self.child.wait()


def secrets(properties: dict[str, str]) -> list[str]:
    """The texts an error must not show: secret-looking properties' values (password, secret, token, key,
    credential) and the password of any user:password@ in a URI (jdbc:postgresql://u:p@host/db too)."""
    found: set[str] = set()
    for key, value in properties.items():
        if value and _SECRET_KEY.search(key):
            found.add(value)
        for userinfo in re.findall(r"://([^/@\s]*)@", value or ""):
            password = userinfo.partition(":")[2]
            if password:
                found |= {password, unquote(password)}
    found |= {quote(s, safe="") for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)  # the longest first: none half-hidden


def redact(text: str, properties: dict[str, str]) -> str:
    """`text` with every one of the properties' secrets (see `secrets`) as ***."""
    for secret in secrets(properties):
        text = text.replace(secret, "***")
    return text


def _tail(stderr: str, properties: dict[str, str], lines: int = 30) -> str:
    """The child's last words, without the Java stack frames that bury them (the messages and their
    "Caused by:" lines stay), secrets redacted."""
    kept = [line for line in stderr.splitlines() if not re.match(r"\s+(at |\.\.\. \d+ more)", line)]
    return redact("\n".join(kept[-lines:]), properties)


def _child_env() -> dict[str, str]:
    """The reader's environment: a few plain variables only. Nothing of this process's SPARK_HOME,
    PYSPARK_* or PYTHONPATH (they name the project's pyspark 4.3), nor any EOSFLOW_/PG/AWS secret."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "JAVA_HOME", "TZ")
    return {k: os.environ[k] for k in keep if k in os.environ}


# -- the catalog eosflow writes by default ---------------------------------------------------------------
def jdbc_catalog(settings: Settings) -> dict[str, str]:
    """eosflow's default catalog (the SQL catalog in the warehouse Postgres, files under
    EOSFLOW_ICEBERG_WAREHOUSE) as Iceberg's JDBC catalog properties: PyIceberg's SqlCatalog keeps its
    tables in the schema Iceberg's JdbcCatalog reads (iceberg_tables, iceberg_namespace_properties).
    Read it with catalog_name = EOSFLOW_ICEBERG_CATALOG (default eosflow): the rows are keyed by it."""
    from sqlalchemy.engine import URL

    uri = URL.create(
        "postgresql+psycopg",
        username=settings.pg_user,
        password=settings.pg_password,
        host=settings.pg_host,
        port=settings.pg_port,
        database=settings.pg_database,
    ).render_as_string(hide_password=False)
    warehouse = os.environ.get("EOSFLOW_ICEBERG_WAREHOUSE", (settings.state_dir / "iceberg").as_uri())
    return from_pyiceberg({"type": "sql", "uri": uri, "warehouse": warehouse})


S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# PyIceberg-only properties: Iceberg's Java catalogs have no use for them.
_PYTHON_ONLY = ("py-io-impl", "py-catalog-impl", "s3.force-virtual-addressing")


def from_pyiceberg(properties: Mapping[str, str]) -> dict[str, str]:
    """A PyIceberg catalog's properties (as eosflow's catalog configuration holds them) as Iceberg's Java
    catalogs name them. Most names are shared (uri, warehouse, credential, token, s3.endpoint,
    s3.access-key-id, s3.secret-access-key, s3.session-token); what differs:
    - the SQL catalog (a SQLAlchemy URI) is the JDBC catalog: jdbc:postgresql://host:port/db, jdbc.user,
      jdbc.password (Postgres only: the reader carries no other driver);
    - s3.region is client.region, and S3FileIO is named (io-impl) when the files are on S3;
    - with an s3.endpoint of its own (a local S3-compatible server), path-style addressing unless
      s3.force-virtual-addressing says otherwise (PyIceberg's default; S3FileIO's is the opposite), and a
      region (us-east-1) if none is given, as the AWS SDK insists on one."""
    given = {k: str(v) for k, v in properties.items()}
    java = {k: v for k, v in given.items() if k not in _PYTHON_ONLY}
    uri = given.get("uri", "")
    kind = (given.get("type") or ("rest" if uri.startswith("http") else "sql")).lower()
    if kind == "rest":
        java["type"] = "rest"  # PyIceberg infers it from the uri; an untyped SparkCatalog is Hive's
    if kind == "sql":
        from sqlalchemy.engine import make_url

        url = make_url(uri)
        if not url.drivername.startswith("postgresql"):
            raise ReaderError(
                f"the Spark reader reads a SQL catalog in Postgres only, not {url.drivername}: its jars "
                f"(infra/maven/{JARS}/pom.xml) carry no other JDBC driver"
            )
        java |= {
            "type": "jdbc",
            "uri": f"jdbc:postgresql://{url.host}:{url.port or 5432}/{url.database}",
            "jdbc.user": url.username or "",
            "jdbc.password": url.password or "",
        }
    if "s3.region" in java:
        java.setdefault("client.region", java.pop("s3.region"))
    on_s3 = given.get("warehouse", "").startswith(("s3://", "s3a://")) or any(
        k.startswith("s3.") for k in given
    )
    if on_s3:
        java.setdefault("io-impl", S3_FILE_IO)
    if "s3.endpoint" in given:
        virtual = given.get("s3.force-virtual-addressing", "false").lower() == "true"
        java.setdefault("s3.path-style-access", "false" if virtual else "true")
        java.setdefault("client.region", "us-east-1")
    return java


# -- making the reader -------------------------------------------------------------------------------------
def folder(settings: Settings) -> Path:
    return settings.state_dir / "readers" / "spark-4.1"


def _stamp_key() -> str:
    """The pinned versions: a change to the requirements (or the Python) makes the venv again."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    digest.update(f"python {sys.version_info[0]}.{sys.version_info[1]}".encode())
    return digest.hexdigest()[:16]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One maker at a time (pytest-xdist workers may ask together); the others wait, then find it made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_reader(settings: Settings, log: Callable[[str], None] = print) -> Reader:
    """The reader, made if needed (idempotent): the virtualenv with pyspark, then the jars (fetched by
    mvn, checked against infra/jars.sha256). Fails, never skips, when pip or Maven fails."""
    home = folder(settings)
    with _locked(home / ".lock"):
        python = _ensure_venv(home / "venv", log)
        try:
            target = jars.fetch(settings, JARS, log=log)
        except StackError as e:
            raise ReaderError(f"the Spark reader's jars: {e}") from None
    found = sorted(target.glob("*.jar"))
    if RUNTIME_JAR not in {j.name for j in found}:
        raise ReaderError(
            f"{target} has no {RUNTIME_JAR}: infra/maven/{JARS}/pom.xml and ICEBERG = {ICEBERG!r} in "
            f"{__file__} disagree; make them name the same version"
        )
    return Reader(python, found)


def _ensure_venv(venv: Path, log: Callable[[str], None]) -> Path:
    python = venv / "bin" / "python"
    stamp = venv / ".eosflow-reader"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == _stamp_key():
        return python
    log(f"installing pyspark {PYSPARK} for the Spark reader in {venv} (once, about {INSTALL_SECONDS} s)")
    started = time.monotonic()
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an install that failed
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "make the reader's virtualenv")
    # The project's pip installs into it (--python): no second pip to bootstrap. Hashes required: every
    # download is checked against reader-requirements.txt.
    _run(
        [
            sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
            "--disable-pip-version-check", "--require-hashes", "-r", str(REQUIREMENTS),
        ],
        f"install pyspark {PYSPARK} (pip, from {REQUIREMENTS.name})",
    )  # fmt: skip
    stamp.write_text(_stamp_key() + "\n")
    log(f"the Spark reader's pyspark {PYSPARK} is installed ({time.monotonic() - started:.0f} s)")
    return python


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise ReaderError(
            f"could not {what} (exit {done.returncode}). Check that the package registry is reachable, "
            f"then run `python -m tests.interop.spark_iceberg --install` again.\n{tail}"
        )


def main(argv: list[str] | None = None) -> int:
    from eosflow_dev.stack import settings as settings_mod

    parser = argparse.ArgumentParser(prog="python -m tests.interop.spark_iceberg", description=__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--install", action="store_true", help="make the Spark reader now (idempotent)")
    what.add_argument(
        "--update-lock",
        action="store_true",
        help=f"fetch the {JARS} jars afresh and record their SHA-256 in {jars.LOCK}",
    )
    args = parser.parse_args(argv)
    settings = settings_mod.load()
    if args.update_lock:
        jars.fetch(settings, JARS, update_lock=True)
        return 0
    reader = ensure_reader(settings)
    print(f"the Spark reader is ready: {reader.python}, {len(reader.jars)} jars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
