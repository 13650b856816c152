"""Where an Iceberg test's table lives: the catalog and the store, as eosflow's catalog properties.

- `sql`: nothing configured, eosflow's embedded default (PyIceberg's SQL catalog in the warehouse, files on
  the local disk);
- `rest`: Apache Iceberg's own REST catalog server (`eosflow stack up --with iceberg-rest`), its warehouse
  on the local disk;
- `s3`: the SQL catalog, the table's files on the stack's S3 server (s3proxy, `--with s3`), a folder of
  the bucket per test.
The servers are started the first time a test asks (eosflow_dev.stack.optional), and left running for others.
"""

from __future__ import annotations

import re

from eosflow.settings import Settings

LAKES = ("sql", "rest", "s3")


def lake_properties(settings: Settings, kind: str, folder: str) -> dict[str, str] | None:
    """EOSFLOW_ICEBERG_CATALOG_PROPERTIES for `kind`, or None (the embedded default)."""
    from eosflow_dev.stack import optional

    if kind == "sql":
        return None
    if kind == "rest":
        return {"uri": optional.ensure(settings, "iceberg-rest", log=lambda m: None)}
    if kind == "s3":
        s3 = optional.s3(settings, log=lambda m: None)
        return {
            "warehouse": f"s3://{s3.bucket}/{re.sub(r'[^A-Za-z0-9_-]', '-', folder)[:60]}",
            **s3_properties(s3),
        }
    raise ValueError(f"no lake {kind!r}: {LAKES}")


def s3_properties(s3) -> dict[str, str]:
    """PyIceberg's FileIO properties for the stack's S3 server (path-style, plain HTTP)."""
    return {
        "s3.endpoint": s3.endpoint,
        "s3.region": s3.region,
        "s3.access-key-id": s3.access_key,
        "s3.secret-access-key": s3.secret_key,
        "s3.force-virtual-addressing": "false",
    }
