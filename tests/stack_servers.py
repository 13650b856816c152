"""Fixtures for the stack's optional servers (eosflow.stack.optional), imported by tests/conftest.py.

`iceberg_rest` and `s3_server` start the server on the project's own settings if it is not running
(the first time, its jars are fetched: about 15-20 s each from an empty Maven cache) and leave it running
for later tests, as `running_stack` does the stack; `eosflow stack down` stops them. A start is locked
per service, so pytest-xdist workers asking at once start it once.
"""

from __future__ import annotations

import pytest

from eosflow.stack import optional


@pytest.fixture(scope="session")
def iceberg_rest(settings) -> optional.IcebergRestDetails:
    """The stack's Iceberg REST catalog: `.uri` for PyIceberg (`type: rest`), `.warehouse`."""
    return optional.iceberg_rest(settings, log=lambda msg: None)


@pytest.fixture(scope="session")
def s3_server(settings) -> optional.S3Details:
    """The stack's S3 server: `.endpoint`, `.region`, `.bucket`, `.access_key`, `.secret_key` (path-style)."""
    return optional.s3(settings, log=lambda msg: None)
