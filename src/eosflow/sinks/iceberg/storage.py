"""An Iceberg table's files, reached through the table's own FileIO, never a filesystem made from a URI.

The FileIO's properties are the catalog's plus what a REST catalog vends with the table (an endpoint,
credentials), so the same code writes to a local folder, to S3 (s3.endpoint, s3.access-key-id, ...) or to
any store PyIceberg's PyArrowFileIO reaches. Spark's tasks get the properties in the function they run
(never in their environment or a command line) and make their own FileIO from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyarrow import fs
    from pyiceberg.table import Table

# eosflow writes with pyarrow (Parquet writers, file listings): the FileIO must be PyIceberg's PyArrowFileIO.
PYARROW_IO = "pyiceberg.io.pyarrow.PyArrowFileIO"


def io_properties(table: Table) -> dict[str, str]:
    """What a task needs to make the table's FileIO: its properties, secrets included (kept out of logs)."""
    return {**dict(table.io.properties), "py-io-impl": PYARROW_IO}


def file_io(properties: Mapping[str, str]):
    """The FileIO of `properties` (from io_properties), made where it is used: a Spark task, the driver."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO(dict(properties))


def filesystem(properties: Mapping[str, str], location: str) -> tuple[fs.FileSystem, str]:
    """The pyarrow filesystem of `location` as the table's FileIO reaches it, and the path inside it."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    io = file_io(properties)
    scheme, netloc, path = PyArrowFileIO.parse_location(location, io.properties)
    return io.fs_by_scheme(scheme, netloc), path


def probe(table: Table) -> None:
    """Ask the store for the table's folder: a refused credential or a missing bucket fails here, before a
    Spark task writes anything (the caller runs this inside reach.reaching)."""
    from pyarrow import fs
    from pyiceberg.io.pyarrow import PyArrowFileIO

    properties = io_properties(table)
    filesystem_, root = filesystem(properties, table.location())
    scheme, bucket, _ = PyArrowFileIO.parse_location(table.location(), properties)
    # An object store answers a listing under a missing bucket with nothing: ask for the bucket itself.
    object_store = scheme not in ("file", "hdfs", "viewfs") and bucket
    if object_store and filesystem_.get_file_info(bucket).type == fs.FileType.NotFound:
        raise FileNotFoundError(f"NoSuchBucket: bucket {bucket!r} does not exist")
    filesystem_.get_file_info(fs.FileSelector(root.rstrip("/"), allow_not_found=True, recursive=False))
