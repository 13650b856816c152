"""The pure parts of staging: what a task counts, how batches of lines become one COPY payload."""

from __future__ import annotations

from collections import namedtuple

import pyarrow as pa

from eosflow.settings import load
from eosflow.sinks.postgres.stage import Staged, _count, _merge, _with_hex_bytes, copy_writer, csv_bytes
from eosflow.spark import cds
from eosflow.spark.session import JVM_OPTIONS, launch_conf
from eosflow.transform import BatchCheck
from tests.orders import SCHEMA

TallyRow = namedtuple("TallyRow", "kafka_topic kafka_partition rejected n lo hi")


def _batch(partitions: list[int], offsets: list[int], rejected: list[bool]) -> pa.Table:
    return pa.table(
        {
            "kafka_topic": ["t"] * len(partitions),
            "kafka_partition": pa.array(partitions, pa.int32()),
            "kafka_offset": pa.array(offsets, pa.int64()),
            "rejected": rejected,
        }
    )


def test_count_adds_batches_per_partition_and_kind_with_offset_bounds():
    tally: dict = {}
    _count(_batch([0, 0, 1], [5, 7, 2], [False, True, False]), tally)
    _count(_batch([0, 0], [3, 9], [False, False]), tally)
    assert tally == {("t", 0, False): [3, 3, 9], ("t", 0, True): [1, 7, 7], ("t", 1, False): [1, 2, 2]}


def test_merge_sums_tasks_and_kinds_into_records_read_per_partition():
    rows = [
        TallyRow("t", 0, False, 2, 3, 9),
        TallyRow("t", 0, True, 1, 7, 7),
        TallyRow("t", 1, False, 4, 0, 3),
        TallyRow("t", 1, False, 1, 10, 10),  # the same partition from a second task
    ]
    assert _merge(rows) == Staged({("t", 0): (3, 3, 9), ("t", 1): (5, 0, 10)}, valid=7, rejected=1)


def test_merge_of_nothing_read_is_empty():
    assert _merge([]) == Staged({}, valid=0, rejected=0)


def test_csv_bytes_keep_null_empty_quotes_newlines_apart_and_instants_in_utc():
    rows = pa.table(
        {
            "s": ['a,"b"', "", None, "zoë\nx", " pad ", "\\."],
            "n": pa.array([1, None, 3, 4, 5, 6], pa.int64()),
            "t": pa.array([0, 123_000, None, 1, 2, 3], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        }
    )
    lines = bytes(csv_bytes(rows)).decode().split("\n")
    assert lines[:3] == [
        '"a,""b""",1,1970-01-01 00:00:00.000000',
        '"",,1970-01-01 00:00:00.123000',  # '' quoted (empty string), NULL unquoted-empty
        ",3,",
    ]
    assert lines[3:5] == ['"zoë', 'x",4,1970-01-01 00:00:00.000001']  # a newline stays inside quotes
    assert lines[5].startswith('" pad ",5,') and lines[6].startswith('"\\.",6,')  # never a bare \.


def test_rejected_bytes_become_bytea_hex_and_null_stays_null():
    rows = pa.table({"raw_key": pa.array([b"\x00\xff", None], pa.binary()), "raw_value": [b"", b"{"]})
    hexed = _with_hex_bytes(rows)
    assert hexed.column("raw_key").to_pylist() == ["\\x00ff", None]
    assert hexed.column("raw_value").to_pylist() == ["\\x", "\\x7b"]


def test_the_driver_jvm_compiles_with_eosflows_jit_choice_and_maps_the_class_archive():
    s = load()
    conf = launch_conf(s)
    assert JVM_OPTIONS in conf["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={cds.archive(s)}" in conf["spark.driver.extraJavaOptions"]
    recording = launch_conf(s, class_archive="-XX:ArchiveClassesAtExit=/x.jsa")
    assert "SharedArchiveFile" not in recording["spark.driver.extraJavaOptions"]
    assert "-XX:ArchiveClassesAtExit=/x.jsa" in recording["spark.driver.extraJavaOptions"]


def test_a_job_of_another_shape_keeps_the_jvm_compilers_but_still_maps_the_archive():
    conf = launch_conf(load(), jit="")
    assert JVM_OPTIONS not in conf["spark.driver.extraJavaOptions"]
    assert "-XX:SharedArchiveFile=" in conf["spark.driver.extraJavaOptions"]
    assert "spark.executor.extraJavaOptions" not in conf


def test_a_task_that_read_nothing_reports_an_empty_typed_tally_without_connecting():
    # A range holding only aborted records gives Spark an empty task; its tally must still match the
    # schema mapInArrow declared, and no COPY (no connection) is opened for it.
    write = copy_writer(
        "postgresql://nobody@127.0.0.1:1/none", "staging.x", BatchCheck("p", "b", "v", 10, SCHEMA)
    )
    (tally,) = list(write(iter([])))
    assert tally.num_rows == 0
    assert [str(t) for t in tally.schema.types] == ["string", "int32", "bool", "int64", "int64", "int64"]


def test_a_range_task_that_read_nothing_reports_an_empty_typed_tally_without_connecting():
    # Staging by range (partitioned targets): a range of only aborted records makes no child; the
    # commit gives it an empty one. The tally must still match mapInArrow's declared schema.
    from types import SimpleNamespace

    from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
    from eosflow.sinks.postgres.stage import range_writer

    plan = Plan("b", "p", "r", (PartitionPlan(OffsetRange("t", 0, 0, 10), first_seen=True),))
    pipeline = SimpleNamespace(target_table="raw.t")
    write = range_writer(
        "postgresql://nobody@127.0.0.1:1/none", pipeline, plan, BatchCheck("p", "b", "v", 10, SCHEMA)
    )
    (tally,) = list(write(iter([])))
    assert tally.num_rows == 0
    assert [str(t) for t in tally.schema.types] == ["string", "int32", "bool", "int64", "int64", "int64"]
