"""The pure parts of staging: what a task counts, how batches of lines become one COPY payload."""

from __future__ import annotations

from collections import namedtuple

import pyarrow as pa
import pytest

from eosflow.ingest import spark_cds
from eosflow.ingest.spark_session import JVM_OPTIONS, launch_conf
from eosflow.ingest.stage import Staged, _count, _joined, _merge, copy_writer
from eosflow.settings import load

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


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_joined_lines_are_the_exact_bytes_newline_separated_even_for_a_slice(kind):
    lines = pa.array(['a,"b"', "", "zoë\nx", "last"], kind).slice(1)
    assert bytes(_joined(lines)) == "\nzoë\nx\nlast".encode()


def test_the_driver_jvm_compiles_huge_methods_and_maps_the_class_archive():
    s = load()
    conf = launch_conf(s)
    assert JVM_OPTIONS in conf["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={spark_cds.archive(s)}" in conf["spark.driver.extraJavaOptions"]
    recording = launch_conf(s, class_archive="-XX:ArchiveClassesAtExit=/x.jsa")
    assert "SharedArchiveFile" not in recording["spark.driver.extraJavaOptions"]
    assert "-XX:ArchiveClassesAtExit=/x.jsa" in recording["spark.driver.extraJavaOptions"]


def test_a_task_that_read_nothing_reports_an_empty_typed_tally_without_connecting():
    # A range holding only aborted records gives Spark an empty task; its tally must still match the
    # schema mapInArrow declared, and no COPY (no connection) is opened for it.
    write = copy_writer("postgresql://nobody@127.0.0.1:1/none", "staging.x")
    (tally,) = list(write(iter([])))
    assert tally.num_rows == 0
    assert [str(t) for t in tally.schema.types] == ["string", "int32", "bool", "int64", "int64", "int64"]
