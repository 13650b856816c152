import pytest

from eosflow import airflow_server as standalone
from tests.integration.conftest import case  # noqa: F401  (a pipeline of its own per test)
from tests.integration.ingest_case import IngestCase


@pytest.fixture(scope="session")
def airflow_server(running_stack, tmp_path_factory):
    """A running `airflow standalone` whose only pipeline has committed data (so replays can run)."""
    root = tmp_path_factory.mktemp("airflow-server")
    pipeline = IngestCase(running_stack, root / "pipelines.yml")
    pipeline.produce(600, seed=501, partitions=2)
    first = pipeline.ingest_process("--run-id", "seed-run")
    assert first.returncode == 0, first.stderr[-2000:]
    server = standalone.start(running_stack, root / "state", pipeline.config_path)
    yield server, pipeline
    standalone.stop(server)
