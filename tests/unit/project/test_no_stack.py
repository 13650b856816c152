"""`make unit`'s guard (tests/no_stack.py): a test that starts a server of the stack fails, naming the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_a_test_that_starts_the_stack_fails_under_make_unit_and_says_to_mark_it(tmp_path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "from eosflow_dev import stack\nfrom eosflow_dev.stack import settings\n\n"
        "def test_starts_the_stack():\n"
        "    s = settings.load()\n"
        "    assert (s.kafka_port, s.pg_port) == (1, 3)  # the closed ports\n"
        "    stack.up(s, log=lambda message: None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.no_stack", "-q", "-p", "no:randomly",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(probe)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "StackNeededError" in done.stdout and "pytest.mark.integration" in done.stdout, done.stdout[-2000:]
