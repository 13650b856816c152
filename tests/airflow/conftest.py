from collections import defaultdict
from datetime import timedelta
from functools import partial

import pytest
from confluent_kafka import TopicPartition

from eosflow.kafka_admin import admin
from eosflow.stack import airflow_server as standalone
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


class TaskOutcomes:
    """How each try of a DAG's tasks ended, as the tasks' own failure and retry callbacks saw it."""

    def __init__(self) -> None:
        self.failed: dict[str, list[BaseException | None]] = defaultdict(list)
        self.retried: dict[str, list[BaseException | None]] = defaultdict(list)

    def watch(self, dag):
        for task in dag.tasks:
            task.on_failure_callback = [partial(self._record, self.failed, task.task_id)]
            task.on_retry_callback = [partial(self._record, self.retried, task.task_id)]
            # A retry that should not happen comes at once (dag.test() waits out the delay).
            task.retry_delay = timedelta(seconds=1)
        return dag

    @staticmethod
    def _record(into, task_id: str, context) -> None:
        into[task_id].append(context.get("exception"))


@pytest.fixture
def task_outcomes() -> TaskOutcomes:
    return TaskOutcomes()


@pytest.fixture
def delete_records():
    """What retention does: everything of a partition below `before` is gone from the log."""

    def delete(pipeline: IngestCase, partition: int, before: int) -> None:
        client = admin(pipeline.settings.bootstrap_servers)  # kept alive until the futures resolve
        futures = client.delete_records([TopicPartition(pipeline.topic, partition, before)])
        for future in futures.values():
            future.result(timeout=30)

    return delete
