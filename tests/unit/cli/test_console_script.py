"""The console script (`eosflow`) against `main`, which tests and Airflow call in a process that goes on."""

from __future__ import annotations

import gc

import pytest

from eosflow.cli import main as cli


def test_the_console_script_returns_mains_code_and_freezes_what_is_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "main", lambda: 3)
    assert gc.get_freeze_count() == 0
    try:
        assert cli.run() == 3
        assert gc.get_freeze_count() > 0  # the teardown's walk of every object skipped (0.25 s a run)
    finally:
        gc.unfreeze()
