"""The Python worker daemon of a warm Spark Connect server (DESIGN.md "A warm Spark"):
`spark.python.daemon.module=eosflow.spark.worker_daemon`.

It is pyspark's own daemon, after importing what eosflow's tasks import and taking the digest of the
eosflow it imported (eosflow.spark.server_code): every worker it forks starts with them, where a worker
of pyspark's daemon would import them in its first task (about 1.5 s here).
"""

import contextlib
import importlib

# What every task imports; each sink's own task modules (a Sink's `task_modules`) are added to them.
COMMON = ("pyarrow", "pyarrow.compute", "eosflow.transform", "eosflow.sources.kafka.range_read")


def modules() -> tuple[str, ...]:
    """The modules to import before forking: the common ones and every declarable sink's task modules."""
    from eosflow.sinks import registry

    found = list(COMMON)
    for kind in registry.kinds():
        with contextlib.suppress(Exception):  # noqa: BLE001 - a broken sink fails its own tasks, clearly
            found += [m for m in registry.sink_class(kind).task_modules if m not in found]
    return tuple(found)


def preload() -> None:
    """Import the tasks' modules and take the code's digest. A module that fails to import is left to the
    task that needs it (which fails with the import's own error): the daemon must start whatever happens."""
    from eosflow.spark import server_code

    for name in modules():
        with contextlib.suppress(Exception):  # noqa: BLE001 - see above
            importlib.import_module(name)
    server_code.loaded()


if __name__ == "__main__":
    from pyspark import daemon

    preload()
    daemon.manager()
