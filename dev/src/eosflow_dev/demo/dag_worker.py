"""One Airflow process for the demo's DAG runs (`python -m eosflow_dev.demo.dag_worker <state dir>`, run in
the Airflow environment by eosflow_dev.demo.dag_runs).

It runs `airflow db migrate`, then `airflow dags test <dag id>` for each DAG id read from stdin, through
Airflow's own command-line parser, so each run is what `airflow dags test` does. Each command's output (every
task log, spark-submit's included) goes to a file of its own in the state dir: fds 1 and 2 are pointed at it,
which children inherit. One line per command goes back on the original stdout: `ok` or `failed <reason>`.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import TextIO


def main(state_dir: Path) -> int:
    from airflow.cli.cli_parser import get_parser

    results = os.fdopen(os.dup(1), "w", buffering=1)
    parser = get_parser()
    _into(state_dir / "demo-airflow-db-migrate.log")
    _answer(results, _run(parser, ["db", "migrate"]))
    for line in sys.stdin:
        dag_id = line.strip()
        _into(state_dir / f"demo-airflow-{dag_id}.log")
        _answer(results, _run(parser, ["dags", "test", dag_id]))
    return 0


def _into(path: Path) -> None:
    """Every later line of this process and of the children it starts goes to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _run(parser, argv: list[str]) -> str | None:
    """The Airflow command's error, or None when it succeeded."""
    try:
        args = parser.parse_args(argv)
        args.func(args)
    except SystemExit as exc:  # what `airflow dags test` raises for a failed run
        return None if exc.code in (0, None) else str(exc.code)
    except Exception as exc:  # noqa: BLE001 - reported to the demo, the traceback to the log
        traceback.print_exc()
        return f"{type(exc).__name__}: {exc}"
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return None


def _answer(results: TextIO, error: str | None) -> None:
    results.write("ok\n" if error is None else f"failed {' '.join(error.split())}\n")


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
