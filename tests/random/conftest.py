import pytest

from tests.random.machine import ScheduleMachine, Stats


@pytest.fixture
def bind_machine(running_stack, tmp_path, monkeypatch):
    """bind_machine(cls): a schedule machine class bound to the running stack and a fresh report."""
    # Each machine instance writes its own pipelines file and points EOSFLOW_PIPELINES at it.
    monkeypatch.setenv("EOSFLOW_PIPELINES", str(tmp_path / "none.yml"))

    def bind(base: type = ScheduleMachine) -> type:
        class Machine(base):
            settings = running_stack
            stats = Stats()
            workdir = tmp_path

        return Machine

    return bind
