"""`eosflow compact` for an Iceberg sink: what many small commits leave, cleaned without touching positions.

1. Small files merged: per day partition, files of fewer than `target_rows` rows together are rewritten as
   one, in one Iceberg commit that deletes them and adds it (an overwrite snapshot; the rows are the same).
   A file whose name not every reader opens (names.readable_name: an older eosflow put the batch id,
   colons and all, in it) is rewritten whatever its size, alone if need be.
2. Old snapshots expired (older than EOSFLOW_ICEBERG_SNAPSHOT_HOURS, 24 by default; the current one is
   always kept): time travel reaches back that far.
3. Files no snapshot names removed: a crashed or fenced run's data files, expired snapshots' files, and
   rejected-row files of batches the ledger already holds; only files older than
   EOSFLOW_ICEBERG_ORPHAN_HOURS (1 by default), so a run writing now keeps its files.

The positions are table properties: none of the three changes them (an overwrite and an expiry carry the
current properties over). Each step is its own commit; a run committing meanwhile makes it fail with
nothing changed (the catalog's compare-and-swap, no retry), and `eosflow compact` can simply run again.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

DEFAULT_TARGET_ROWS = 1_000_000
_UNREADABLE = "files with names Hadoop-based readers cannot open rewritten"


@dataclass
class Compacted:
    table: str
    merged_files: int = 0  # small files rewritten...
    into: int = 0  # ...into this many
    renamed: int = 0  # of the files rewritten, those whose names not every reader opens
    expired_snapshots: int = 0
    removed_files: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.table}: {self.merged_files} files merged into {self.into}"
            + (f" ({self.renamed} {_UNREADABLE})" if self.renamed else "")
            + f", {self.expired_snapshots} snapshots expired, {self.removed_files} unreferenced files removed"
            + (f" ({'; '.join(self.notes)})" if self.notes else "")
        )


def compact(table, target_rows: int | None, now: datetime | None = None) -> Compacted:
    from pyiceberg.exceptions import CommitFailedException

    now = now or datetime.now(UTC)
    done = Compacted(".".join(table.name()))
    try:
        _merge_small_files(table, target_rows or DEFAULT_TARGET_ROWS, done)
        table.refresh()
        keep_hours = float(os.environ.get("EOSFLOW_ICEBERG_SNAPSHOT_HOURS", "24"))
        before = len(table.metadata.snapshots)
        table.maintenance.expire_snapshots().older_than(now - timedelta(hours=keep_hours)).commit()
        table.refresh()
        done.expired_snapshots = before - len(table.metadata.snapshots)
    except CommitFailedException:
        done.notes.append(
            "a run committed meanwhile: nothing of this step changed; run eosflow compact again"
        )
    orphan_hours = float(os.environ.get("EOSFLOW_ICEBERG_ORPHAN_HOURS", "1"))
    done.removed_files = _remove_unreferenced(table, now - timedelta(hours=orphan_hours))
    return done


def _merge_small_files(table, target_rows: int, done: Compacted) -> None:
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow

    from eosflow.sinks.iceberg.names import readable_name

    groups: dict[object, list] = {}
    for task in table.scan().plan_files():
        if task.delete_files:
            continue  # a file with row deletes is left to a rewrite that applies them
        if task.file.record_count < target_rows or not readable_name(task.file.file_path):
            groups.setdefault(tuple(task.file.partition), []).append(task.file)
    wanted = schema_to_pyarrow(table.schema(), include_field_ids=False)
    rewrites: list[tuple[list, object]] = []
    for files in groups.values():
        for chunk in _chunks(sorted(files, key=lambda f: f.file_path), target_rows):
            if len(chunk) < 2 and readable_name(chunk[0].file_path):
                continue  # one small file alone: nothing to merge it with, and its name is fine
            merged = pa.concat_tables([_as(_read(table, f.file_path), wanted) for f in chunk])
            path = f"{table.location().rstrip('/')}/data/compacted-{uuid.uuid4().hex}.parquet"
            with table.io.new_output(path).create(overwrite=False) as out:
                pq.write_table(merged, out)
            rewrites.append((chunk, parquet_file_to_data_file(table.io, table.metadata, path)))
    if not rewrites:
        return
    with table.transaction() as tx, tx.update_snapshot().overwrite() as rewrite:
        for old, new in rewrites:
            for f in old:
                rewrite.delete_data_file(f)
            rewrite.append_data_file(new)
    done.merged_files = sum(len(old) for old, _ in rewrites)
    done.renamed = sum(not readable_name(f.file_path) for old, _ in rewrites for f in old)
    done.into = len(rewrites)


def _chunks(files: list, target_rows: int) -> list[list]:
    chunks: list[list[Any]] = []
    current: list[Any] = []
    rows = 0
    for f in files:
        if current and rows + f.record_count > target_rows:
            chunks.append(current)
            current, rows = [], 0
        current.append(f)
        rows += f.record_count
    if current:
        chunks.append(current)
    return chunks


def _read(table, path: str) -> pa.Table:
    import pyarrow.parquet as pq

    with table.io.new_input(path).open() as f:
        return pq.read_table(f)


def _as(data: pa.Table, wanted: pa.Schema) -> pa.Table:
    """A file written before a column was added gets it as nulls; every file in the table's types."""
    columns = [
        data.column(f.name) if f.name in data.column_names else pa.nulls(len(data), f.type) for f in wanted
    ]
    return pa.Table.from_arrays(columns, schema=wanted)


def _remove_unreferenced(table, older_than: datetime) -> int:
    """Files under data/ and eosflow-rejected/ that no snapshot (nor a position's last commit or replay)
    names; a change stream's staged changes (eosflow-changes/: read by the commit, never added) and its
    tombstone files but the current one (eosflow-deleted/)."""
    from pyarrow import fs

    from eosflow.sinks.iceberg import storage
    from eosflow.sinks.iceberg.catalog import rejected_files
    from eosflow.sinks.iceberg.state import STAGED_FOLDER, TOMBSTONE_FOLDER, tombstone_file

    referenced = _every_snapshots_files(table)
    for kind in ("data", "replay"):
        referenced |= {f for files in rejected_files(table, kind).values() for f in files}
    referenced |= {f for f in (tombstone_file(table),) if f is not None}
    location = table.location().rstrip("/")
    filesystem, root = storage.filesystem(storage.io_properties(table), location)
    removed = 0
    for folder in ("data", "eosflow-rejected", STAGED_FOLDER, TOMBSTONE_FOLDER):
        selector = fs.FileSelector(f"{root.rstrip('/')}/{folder}", recursive=True, allow_not_found=True)
        for info in filesystem.get_file_info(selector):
            if info.type != fs.FileType.File:
                continue
            uri = f"{location}/{info.path.removeprefix(root.rstrip('/') + '/')}"
            if uri in referenced or info.mtime is None or info.mtime.astimezone(UTC) >= older_than:
                continue
            filesystem.delete_file(info.path)
            removed += 1
    return removed


def _every_snapshots_files(table) -> set[str]:
    """The file of every manifest entry of every snapshot. Not inspect.all_files(): PyIceberg 0.12 fails on
    a snapshot with no manifest (the empty append of a commit that added no data file)."""
    found: set[str] = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                found.add(entry.data_file.file_path)
    return found
