"""Install tests/sinks/jsonl_sink.py as a distribution of its own, the way pip would: a module and a
dist-info with an `eosflow.sinks` entry point, in a folder put on sys.path and PYTHONPATH (so the
`eosflow` processes, spark-submit and Spark's Python workers find it too)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

MODULE = "eosflow_jsonl_sink"


def install(site: Path) -> Path:
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).with_name("jsonl_sink.py"), site / f"{MODULE}.py")
    info = site / f"{MODULE}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: eosflow-jsonl-sink\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[eosflow.sinks]\njsonl = {MODULE}:JsonLinesSink\n"
        f"jsonl_flaky_latency = {MODULE}:JsonLinesFlakyLatencySink\n"
    )
    return site


def pythonpath(site: Path) -> str:
    return os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
