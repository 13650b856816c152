import dataclasses
import json
from collections import defaultdict
from datetime import timedelta
from functools import partial

import pytest
from confluent_kafka import TopicPartition

from eosflow.kafka_admin import admin
from eosflow_dev.stack import airflow_local
from eosflow_dev.stack import airflow_server as standalone
from tests.integration.conftest import case  # noqa: F401  (a pipeline of its own per test)
from tests.integration.ingest_case import IngestCase

OUTSIDER = "outsider"


def token_of(server, settings, username: str) -> str:
    """A login of another user than admin: SimpleAuthManager wrote their password beside admin's."""
    home = dataclasses.replace(settings, state_dir=server.log_path.parent)
    password = json.loads(airflow_local.passwords_file(home).read_text())[username]
    code, body = server.request("POST", "/auth/token", {"username": username, "password": password})
    assert code in (200, 201), body
    return body["access_token"]


@pytest.fixture(scope="session")
def airflow_server(running_stack, tmp_path_factory):
    """A running `airflow standalone` whose only pipeline has committed data (so replays can run).

    Besides `admin`, a user `outsider` who may log in and read no DAG (no role in Airflow's
    SimpleAuthManager): the eosflow view must show them no pipeline."""
    root = tmp_path_factory.mktemp("airflow-server")
    pipeline = IngestCase(running_stack, root / "pipelines.yml")
    pipeline.produce(600, seed=501, partitions=2)
    first = pipeline.ingest_process("--run-id", "seed-run")
    assert first.returncode == 0, first.stderr[-2000:]
    users = {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{airflow_local.ADMIN_USER}:admin,{OUTSIDER}:"}
    server = standalone.start(running_stack, root / "state", pipeline.config_path, env=users)
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
