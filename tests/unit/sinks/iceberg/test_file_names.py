"""Iceberg sink file names every reader opens (DESIGN.md, Iceberg sinks: file names): names made of
`[A-Za-z0-9._-]` only, the batch kept in each file's Parquet metadata, `eosflow compact` rewriting the
files an older eosflow named with the raw batch id, and `eosflow verify` warning about them.

The tables here live in a SQLite SQL catalog and the local filesystem: PyIceberg's own code, no stack.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eosflow.dbt_build import CheckResult, VerifyResult
from eosflow.sinks.iceberg import maintenance, storage
from eosflow.sinks.iceberg.files import _Writers
from eosflow.sinks.iceberg.names import name_part, readable_name

SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
OLD_BATCH = "backfill__20261126T152610_1ff693:replay:orders:0:0-100"
AWKWARD = st.sampled_from([":", "%2F", " ", "#", "?", ".", "_", "-", "é", "東", "/", "\\", "\n", "+", "="])
TEXTS = st.one_of(st.text(), st.lists(st.one_of(AWKWARD, st.text(max_size=3))).map("".join))


@given(TEXTS)
def test_any_batch_id_or_topic_becomes_a_name_part_every_reader_opens(text):
    part = name_part(text)
    assert SAFE.match(part), part
    assert len(part) <= 48 + 1 + 16
    assert readable_name(f"file:///wh/lake/t/data/{part}-{part}-3-2026-11-26-0123456789ab.parquet")


@given(TEXTS, TEXTS)
def test_distinct_batch_ids_never_share_a_name_part(a, b):
    assert (name_part(a) == name_part(b)) == (a == b)


def test_a_name_part_stays_readable_and_colliding_texts_stay_apart():
    assert name_part("orders:run-7").startswith("orders_run-7-")
    assert name_part("a:b") != name_part("a_b") != name_part("a b")
    assert name_part("..._hidden").startswith("hidden-")
    assert len(name_part("x" * 1000)) == 48 + 1 + 16


@pytest.mark.parametrize(
    ("name", "readable"),
    [
        (f"{OLD_BATCH}-orders-0-2026-11-26-0123456789ab.parquet", False),  # the old naming: colons
        ("compacted-3f2a.parquet", True),
        ("00000-0-5a8c.parquet", True),  # PyIceberg's own
        (".hidden.parquet", False),
        ("_SUCCESS", False),
        ("a%2Fb.parquet", False),
        ("a b.parquet", False),
    ],
)
def test_a_file_name_is_readable_only_if_made_of_safe_characters(name, readable):
    assert readable_name(f"file:///wh/lake/t/data/{name}") is readable
    assert readable_name(f"s3://bucket/some:prefix/lake/t/data/{name}") is readable  # the name only


def test_a_task_names_its_files_safely_and_keeps_the_batch_in_their_parquet_metadata(tmp_path):

    coordinates = [("kafka_topic", pa.string()), ("kafka_partition", pa.int32())]
    coordinates.append(("kafka_offset", pa.int64()))
    valid = pa.schema([*coordinates, ("kafka_timestamp", pa.timestamp("us", "UTC"))])
    rejected = pa.schema([*coordinates, ("error", pa.string())])
    rows = pa.RecordBatch.from_pydict(
        {
            "kafka_topic": [".orders:eu"] * 3,
            "kafka_partition": pa.array([4] * 3, pa.int32()),
            "kafka_offset": [10, 11, 12],
            "kafka_timestamp": pa.array([1_764_000_000_000_000] * 3, pa.timestamp("us", "UTC")),
            "error": [None, "bad json", None],
        }
    )
    location = tmp_path.as_uri()
    writers = _Writers(*storage.filesystem({}, location), location, OLD_BATCH, "orders")
    writers.add((".orders:eu", 4), rows, valid, rejected)
    writers.close()
    (row,) = writers.rows()

    paths = json.loads(row["data_files"]) + json.loads(row["rejected_files"])
    assert len(paths) == 2
    for path in paths:
        relative = path.removeprefix(location + "/")
        assert all(SAFE.match(part) for part in relative.split("/")), relative
        meta = pq.read_metadata(Path(tmp_path, relative)).metadata
        assert meta[b"eosflow.batch_id"] == OLD_BATCH.encode()
        assert meta[b"eosflow.pipeline"] == b"orders"
        assert meta[b"eosflow.kafka_topic"] == b".orders:eu"
        assert meta[b"eosflow.kafka_partition"] == b"4"
    kinds = {pq.read_metadata(Path(tmp_path, p.removeprefix(location + "/"))).metadata[b"eosflow.kind"]
             for p in paths}  # fmt: skip
    assert kinds == {b"data", b"rejected"}
    assert pq.read_table(Path(tmp_path, paths[0].removeprefix(location + "/"))).num_rows == 2


def _table(tmp_path: Path):
    """An Iceberg table in a SQLite catalog, with a file an older eosflow named with the raw batch id
    (5 rows, added as eosflow adds its files) and a small one named safely (2 rows)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("lake")
    schema = Schema(NestedField(1, "batch_id", StringType(), required=False),
                    NestedField(2, "kafka_offset", LongType(), required=False))  # fmt: skip
    table = catalog.create_table("lake.t", schema)
    data = Path(table.location().removeprefix("file://")) / "data"
    data.mkdir(parents=True)
    files = []
    for name, offsets in ((f"{OLD_BATCH}-orders-0-2026-11-26-0123456789ab.parquet", range(5)),
                          ("safe-one.parquet", range(5, 7))):  # fmt: skip
        pq.write_table(
            pa.table({"batch_id": [OLD_BATCH] * len(offsets), "kafka_offset": list(offsets)}), data / name
        )
        files.append(f"{table.location()}/data/{name}")
    table.add_files(files)
    return catalog.load_table("lake.t")


def _names(table) -> list[str]:
    return [p.rsplit("/", 1)[1] for p in table.inspect.files().column("file_path").to_pylist()]


def test_compact_rewrites_a_file_no_hadoop_reader_opens_even_alone_and_large(tmp_path):
    table = _table(tmp_path)
    rows = sorted(table.scan().to_arrow().column("kafka_offset").to_pylist())
    done = maintenance.compact(table, target_rows=3)  # the old file (5 rows) is not small
    table.refresh()
    assert all(SAFE.match(n) for n in _names(table)), _names(table)
    assert sorted(table.scan().to_arrow().column("kafka_offset").to_pylist()) == rows
    assert (done.merged_files, done.into, done.renamed) == (1, 1, 1)
    assert "1 files with names Hadoop-based readers cannot open rewritten" in done.line()


def test_compact_merges_a_small_file_with_an_unreadable_name_with_its_neighbours(tmp_path):
    table = _table(tmp_path)
    done = maintenance.compact(table, target_rows=100)
    table.refresh()
    assert (done.merged_files, done.into, done.renamed) == (2, 1, 1)
    (name,) = _names(table)
    assert SAFE.match(name)
    assert len(table.scan().to_arrow()) == 7


def test_verify_warns_about_files_no_hadoop_reader_opens_and_names_the_fix(tmp_path):
    from eosflow.sinks.iceberg.verify import file_name_warning

    table = _table(tmp_path)
    warning = file_name_warning(table, "orders")
    assert warning is not None and warning.status == "warn" and warning.ok
    assert warning.name == "iceberg_file_names" and warning.failures == 1
    assert "1 data file" in warning.message and OLD_BATCH in warning.message
    assert "eosflow compact --pipeline orders" in warning.message
    result = VerifyResult("orders", 0, (CheckResult("unique_kafka_coordinates", "I1", "pass", 0), warning),
                          "", tmp_path)  # fmt: skip
    assert result.ok  # a warning does not fail the verification...
    assert "WARN" in result.table() and "eosflow compact --pipeline orders" in result.table()  # ...it shows

    maintenance.compact(table, target_rows=100)
    table.refresh()
    assert file_name_warning(table, "orders") is None
