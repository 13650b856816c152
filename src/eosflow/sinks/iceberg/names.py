"""Names of the files an Iceberg sink writes into a table: ones every reader opens (DESIGN.md, Iceberg
sinks: file names).

Hadoop's `Path` (Spark, Flink, Hive, Trino's Hive connector) takes a `:` in a file name for a URI scheme
and fails (`Relative path in absolute URI`), and a URI reader misreads `%`, `#`, `?` or a space; files
starting with `.` or `_` are hidden to Hadoop-based readers. So a name is made of `[A-Za-z0-9._-]` only
and starts with a letter or a digit.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_READABLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
PART_CHARS = 48  # of the text kept in a name part: a name stays far below the 255 bytes filesystems allow
HASH_CHARS = 16  # hex digits of the SHA-256 of the text: 64 bits, distinct texts stay apart


def name_part(text: str, limit: int = PART_CHARS) -> str:
    """`text` (a batch id, a topic) as a part of a file name every reader opens: other characters `_`,
    leading `.`, `_`, `-` dropped, at most `limit` characters kept, then `-` and a hash of the whole
    text, so two texts that read alike once replaced (`a:b`, `a_b`) never give the same part."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    kept = _UNSAFE.sub("_", text).lstrip("._-")[:limit]
    return f"{kept}-{digest}" if kept else digest


def readable_name(path: str) -> bool:
    """Whether the file's name (the last part of its path; the folders above are the user's location)
    is one every reader opens."""
    return bool(_READABLE.match(path.rstrip("/").rsplit("/", 1)[-1]))
