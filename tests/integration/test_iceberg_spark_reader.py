"""The tables an Iceberg sink writes, read by an engine that is not PyIceberg: Apache Spark 4.1 with
Iceberg's own Spark runtime, through Iceberg's JDBC catalog on the same Postgres tables PyIceberg's SQL
catalog keeps. After runs, a replay and compact, Spark reads exactly the rows PyIceberg reads.

The reader (a pyspark 4.1.1 virtualenv and Iceberg's jars, tests/interop/spark_iceberg.py) is made on first
use: about 40 s on a cold machine, 5 s with pip's and Maven's caches warm. The reads of a pytest process
share one Spark process (Spark's start, about 10 s of a lone read's 15 on 2 cores, paid once); each read
has a Spark session of its own, so its catalog is built from its own properties. The fixtures, shared with
the Iceberg state sink's tests, are in tests/integration/conftest.py.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from eosflow.sinks.iceberg.config import PROPERTIES_ENV, CatalogConfig
from tests.integration.lakes import lake_properties
from tests.integration.test_iceberg_sink import _replay, as_iceberg_sink, produce_bad
from tests.interop.spark_iceberg import (
    ReaderError,
    ReaderSession,
    SparkRead,
    from_pyiceberg,
    jdbc_catalog,
)

pytestmark = pytest.mark.integration


def _coordinates(row: dict) -> tuple[str, int, int]:
    return row["kafka_topic"], row["kafka_partition"], row["kafka_offset"]


def _pyiceberg(case, table: str):
    """The table as PyIceberg reads it: its rows (Arrow) and its snapshot ids, oldest first."""
    from eosflow.sinks.iceberg.catalog import catalog

    t = catalog(case.settings).load_table(table)
    return t.scan().to_arrow(), [s.snapshot_id for s in t.metadata.snapshots]


def _fields(schema) -> list[tuple[str, str, bool]]:
    """Names, types, nullability; Arrow's large_string and string alike (PyIceberg hands either)."""
    return [(f.name, str(f.type).replace("large_", ""), f.nullable) for f in schema]


def assert_spark_reads_what_pyiceberg_reads(
    case, reader: ReaderSession, table: str, **extra: str
) -> SparkRead:
    """Same columns and types, same count, the same Kafka coordinates (none twice), every value equal; and
    the same snapshots. Returns Spark's read."""
    config = CatalogConfig.of(case.settings)  # the catalog the case's runs wrote to (its lake)
    got = reader.read(from_pyiceberg(config.properties) | extra, table, catalog_name=config.name)
    want, snapshots = _pyiceberg(case, table)
    assert _fields(got.rows.schema) == _fields(want.schema)
    spark_rows, pyiceberg_rows = got.rows.to_pylist(), want.to_pylist()
    assert got.count == len(spark_rows) == len(pyiceberg_rows) > 0
    keys = [_coordinates(r) for r in spark_rows]
    assert len(set(keys)) == len(keys), "Spark read a record twice"
    by_key = {_coordinates(r): r for r in pyiceberg_rows}
    assert set(keys) == set(by_key)
    unequal = [
        (k, c, r[c], by_key[k][c])
        for k, r in zip(keys, spark_rows, strict=True)
        for c in r
        if r[c] != by_key[k][c]
    ]
    assert not unequal, f"{len(unequal)} values differ (record, column, Spark, PyIceberg): {unequal[:5]}"
    assert [s["snapshot_id"] for s in got.snapshots] == snapshots
    return got


@contextmanager
def watching_processes_for(secret: str) -> Iterator[list[str]]:
    """Every process's command line and environment, looked at every 0.1 s until the block ends: where
    `secret` shows up (a list of "pid: cmdline|environ"; empty if nowhere)."""
    found: list[str] = []
    done = threading.Event()

    def look() -> None:
        while not done.is_set():
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit() or int(proc.name) == os.getpid():
                    continue  # this process holds the secret in memory, as the caller of the reader
                for part in ("cmdline", "environ"):
                    try:
                        held = secret.encode() in (proc / part).read_bytes()
                    except OSError:
                        continue  # gone, or not ours to read
                    if held and f"{proc.name}: {part}" not in found:
                        found.append(f"{proc.name}: {part}")
            time.sleep(0.1)

    watcher = threading.Thread(target=look, daemon=True)
    watcher.start()
    try:
        yield found
    finally:
        done.set()
        watcher.join()


def test_spark_reads_the_rows_pyiceberg_reads_after_runs_a_replay_and_compact(case, spark41, monkeypatch):
    """About a minute: one table through three stages, read by Spark after each; the module's first test
    starts the reader's Spark (about 10 s) and makes the table's history once."""
    table = as_iceberg_sink(case)
    case.produce(150, seed=51, partitions=2)
    produce_bad(case, partition=1)
    assert case.ingest().outcome == "committed"
    case.produce(60, seed=52, partitions=2)
    assert case.ingest().outcome == "committed"

    # 1. Two runs' appends. The catalog's properties (a made-up secret among them, passed through to
    # Iceberg as an unknown property) reach Spark on its standard input: no command line or environment
    # of any process holds them.
    secret = f"tok-{uuid.uuid4().hex}"
    with watching_processes_for(secret) as leaks:
        runs = assert_spark_reads_what_pyiceberg_reads(case, spark41, table, **{"eosflow-test.token": secret})
    assert leaks == []
    assert len(runs.snapshots) == 2 and (runs.spark_version, runs.iceberg_version) == ("4.1.1", "1.12.0")

    # 2. A replay of partition 0 under a new transform version: the range's rows replaced in one commit.
    case.write_config(transform_version="v2")
    assert [s.outcome for s in _replay(case, 10, 60, "replay-1")] == ["committed"]
    replayed = assert_spark_reads_what_pyiceberg_reads(case, spark41, table)
    versions = {
        (r["kafka_partition"], r["kafka_offset"]): r["transform_version"] for r in replayed.rows.to_pylist()
    }
    assert {k for k, v in versions.items() if v == "v2"} == {(0, o) for o in range(10, 60)}

    # 3. compact: the small files merged, the old snapshots expired (and their files removed).
    monkeypatch.setenv("EOSFLOW_ICEBERG_SNAPSHOT_HOURS", "0")
    monkeypatch.setenv("EOSFLOW_ICEBERG_ORPHAN_HOURS", "0")
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        done = case.pipeline.sink.compact(conn, case.pipeline, None, lambda m: None)
    assert done.merged_files >= 2 and done.expired_snapshots >= 2
    compacted = assert_spark_reads_what_pyiceberg_reads(case, spark41, table)
    assert len(compacted.snapshots) == 1 and compacted.count == replayed.count


@pytest.mark.parametrize("lake", ["rest", "s3"])
def test_spark_reads_a_table_on_the_rest_catalog_and_one_on_the_s3_server(
    case, spark41, running_stack, monkeypatch, lake
):
    """Spark through Iceberg's REST catalog (its own RESTCatalogServer), and from the S3 server (S3FileIO,
    path-style): after a run killed mid-upload (on S3), its retry, another run and compact."""
    import json

    properties = lake_properties(running_stack, lake, case.name)
    monkeypatch.setenv(PROPERTIES_ENV, json.dumps(properties))
    table = as_iceberg_sink(case)
    first = case.produce(120, seed=61, partitions=2)
    produce_bad(case, partition=1)
    if lake == "s3":
        killed = case.ingest_process("--run-id", "killed", EOSFLOW_CRASH_AT="in_file_upload")
        assert killed.returncode != 0 and "in_file_upload" in killed.stderr, killed.stderr[-3000:]
    assert case.ingest().outcome == "committed"
    second = case.produce(40, seed=62, partitions=2)
    assert case.ingest().outcome == "committed"
    monkeypatch.setenv("EOSFLOW_ICEBERG_SNAPSHOT_HOURS", "0")
    monkeypatch.setenv("EOSFLOW_ICEBERG_ORPHAN_HOURS", "0")
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        done = case.pipeline.sink.compact(conn, case.pipeline, None, lambda m: None)
    assert done.merged_files >= 2
    read = assert_spark_reads_what_pyiceberg_reads(case, spark41, table)
    assert read.count == len(first.visible()) + len(second.visible()) and len(read.snapshots) == 1


def test_a_read_that_fails_raises_with_sparks_own_words_and_no_secret(case, spark41):
    """A password in the catalog's URI, which the JDBC driver quotes back in its error: the child's last
    words come back without their stack frames, the password as ***. The catalog's name is the one the
    session's earlier reads used with the right URI: this read's catalog is built from its own properties,
    and the session reads on after it."""
    secret = f"pw{uuid.uuid4().hex}"
    uri = f"jdbc:postgresql://eosflow:{secret}@127.0.0.1:{case.settings.pg_port}/warehouse"
    with pytest.raises(ReaderError, match=r"could not read lake\.anything") as e:
        spark41.read(jdbc_catalog(case.settings) | {"uri": uri}, "lake.anything")
    message = str(e.value)
    assert "Failed to connect: jdbc:postgresql://" in message and "***@127.0.0.1" in message, message
    assert secret not in message and "\tat org.apache" not in message, message
    with pytest.raises(ReaderError, match=r"NoSuchTableException|Table or view not found|TABLE_OR_VIEW_NOT"):
        spark41.read(jdbc_catalog(case.settings), "lake.anything")


def test_a_read_that_hangs_is_ended_with_sparks_jvm(case, spark_reader, monkeypatch):
    """Past the time allowed, the read's whole process group goes: no JVM is left on the machine."""
    from tests.interop import spark_iceberg

    monkeypatch.setattr(spark_iceberg, "READ_TIMEOUT_S", 4)  # Spark is still starting then
    # A session of its own, whose Spark is still starting at 4 s.
    with (
        pytest.raises(ReaderError, match=r"did not read lake\.anything within 4 s") as e,
        spark_reader.session() as own,
    ):
        own.read(jdbc_catalog(case.settings), "lake.anything")
    assert e.value.pid is not None
    deadline = time.monotonic() + 10
    while (left := _in_group(e.value.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"processes of the read's group still running: {left}"


def _in_group(pgid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # (state, ppid, pgrp, ...); a zombie is gone
            found.append(int(stat.parent.name))
    return found
