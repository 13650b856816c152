"""What the bench asks of the stack before it loads anything: the core services answering. An optional
server (Kafka Connect, the REST catalog, ...) is none of its business: the bench starts the one it uses
(the Spark Connect server) itself. A CI run failed when another test was starting the shared Connect
worker at the moment the change bench looked ("connect not running")."""

from __future__ import annotations

from eosflow_dev.bench.cli import stack_not_ready
from eosflow_dev.stack import ServiceStatus


def _status(name: str, pid: int | None, healthy: bool, optional: bool = False) -> ServiceStatus:
    return ServiceStatus(name, pid, healthy, endpoint="-", optional=optional)


def test_an_optional_server_starting_or_not_answering_does_not_stop_the_bench():
    statuses = [
        _status("kafka", 1, True),
        _status("postgres", 2, True),
        _status("registry", 3, True),
        _status("connect", 4, False, optional=True),  # another test is starting it
        _status("iceberg-rest", None, False, optional=True),
    ]
    assert stack_not_ready(statuses) == []


def test_a_core_service_down_or_not_answering_stops_the_bench():
    statuses = [
        _status("kafka", None, False),
        _status("postgres", 2, False),
        _status("registry", 3, True),
        _status("connect", 4, True, optional=True),
    ]
    assert stack_not_ready(statuses) == ["kafka (stopped)", "postgres (running, not answering)"]
