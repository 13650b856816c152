"""Sinks by their `sink:` name: the `eosflow.sinks` entry-point group, like the transforms'.

eosflow registers its own two there (pyproject.toml); a package of a user's adds one with
`[project.entry-points."eosflow.sinks"] mysink = "mypackage.sink:MySink"`, MySink a subclass of
eosflow.sinks.protocol.Sink. The built-in ones are also known without the package's metadata (a Spark
driver started from the zipped sources has none).
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points

from eosflow.errors import PipelineConfigError
from eosflow.sinks.protocol import Sink

ENTRY_POINT_GROUP = "eosflow.sinks"
DEFAULT = "warehouse"
_BUILT_IN = {
    "warehouse": "eosflow.sinks.postgres.sink:PostgresSink",
    "kafka": "eosflow.sinks.kafka.sink:KafkaSink",
    "iceberg": "eosflow.sinks.iceberg.sink:IcebergSink",
}


def _references() -> dict[str, str]:
    found = dict(_BUILT_IN)
    found.update({e.name: e.value for e in entry_points(group=ENTRY_POINT_GROUP)})
    return found


def kinds() -> list[str]:
    """Every sink name that can be declared, built in or added by a package."""
    return sorted(_references())


@cache
def sink_class(kind: str) -> type[Sink]:
    """The sink class declared as `sink: <kind>`; PipelineConfigError if there is none."""
    references = _references()
    if kind not in references:
        raise PipelineConfigError(
            f"sink {kind!r} unknown; one of {kinds()} (a package adds one through the "
            f"{ENTRY_POINT_GROUP!r} entry-point group)"
        )
    module_name, _, name = references[kind].partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise PipelineConfigError(
            f"sink {kind!r}: cannot load {references[kind]} ({exc}); install its package in eosflow's "
            "environment (the Spark workers import it too)"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Sink)):
        raise PipelineConfigError(
            f"sink {kind!r}: {references[kind]} is not a subclass of eosflow.sinks.protocol.Sink"
        )
    return cls
