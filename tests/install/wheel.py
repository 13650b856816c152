"""The product wheel, built as a fresh clone would build it: the unit test of its contents
(tests/unit/project/test_installable.py) and the clean-install test (test_clean_install.py) install the
same."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(out: Path, source: Path) -> Path:
    """`pip wheel --no-deps` of a copy in `source` of what a wheel is made of, into `out`: setuptools packs
    everything its build/ folder holds, and a checkout's build/ keeps files an earlier build copied there."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info", "target", "logs")
    for folder in ("src", "plugins"):
        shutil.copytree(ROOT / folder, source / folder, ignore=junk)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = out.glob("eosflow-*.whl")
    return built
