"""A TOASTed column Debezium leaves out must keep its value across every primary-key move, not only the
first: found by the change streams' randomized schedule (tests/random/change_stream.py, `make soak`
EOSFLOW_SOAK_RUNNERS=changes), where a row whose key was updated twice, or updated and then changed in
another column, ended with NULL in its TOASTed column while the source held its text.

Debezium's changes as its JSON converter writes them (the create after a key update carries the old key in
the header __debezium.oldkey, the TOASTed column its placeholder), into the real broker and warehouse."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from eosflow.kafka_admin import ensure_topic
from eosflow.schema.changes import PLACEHOLDER
from eosflow.verify import verify_pipeline
from tests.integration.test_change_streams import as_change_stream, state_of

pytestmark = pytest.mark.integration
LONG = "x" * 5000  # what the source row holds out of line (TOAST); Debezium sends it with the insert only


class Debezium:
    """One table's changes in one partition, by LSN, as Debezium sends them."""

    def __init__(self, case) -> None:
        self.case, self.lsn = case, 1000
        ensure_topic(case.settings.bootstrap_servers, case.topic, 1, log=lambda m: None)
        self.producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})

    def _send(self, op: str, row: dict, old_key: int | None = None) -> None:
        payload = {
            "op": op,
            "before": row if op == "d" else None,
            "after": None if op == "d" else row,
            "source": {"lsn": self.lsn, "ts_ms": 1764151200000 + self.lsn},
        }
        headers = None
        if old_key is not None:
            headers = [("__debezium.oldkey", json.dumps({"schema": {}, "payload": {"id": old_key}}).encode())]
        key = json.dumps({"id": row["id"]}).encode()
        self.producer.produce(self.case.topic, key=key, value=json.dumps(payload).encode(), headers=headers)

    def insert(self, row: dict) -> None:
        self.lsn += 10
        self._send("c", row)

    def update(self, row: dict) -> None:
        self.lsn += 10
        self._send("u", row)

    def move(self, old: int, row: dict) -> None:
        """UPDATE ... SET id = new: a delete of the old key, its tombstone, a create naming the old key."""
        self.lsn += 10
        self._send("d", {"id": old, "email": None, "balance": None, "notes": None})
        self.producer.produce(self.case.topic, key=json.dumps({"id": old}).encode(), value=None)
        self._send("c", row, old_key=old)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


def _ingest(case) -> None:
    assert case.ingest().outcome == "committed"


@pytest.mark.parametrize("runs", ["one run", "a run per change"])
def test_a_toasted_column_keeps_its_value_across_two_key_moves(case, runs):
    state = as_change_stream(case, max_value_bytes=1_000_000)
    src = Debezium(case)
    steps = [
        lambda: src.insert({"id": 1, "email": "a@x", "balance": "1.00", "notes": LONG}),
        lambda: src.move(1, {"id": 2, "email": "a@x", "balance": "1.00", "notes": PLACEHOLDER}),
        lambda: src.move(2, {"id": 3, "email": "a@x", "balance": "1.00", "notes": PLACEHOLDER}),
    ]
    for step in steps:
        step()
        if runs != "one run":
            src.flush()
            _ingest(case)
    src.flush()
    _ingest(case)
    assert state_of(case, state) == {3: ("a@x", pytest.approx(1), LONG)}
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


@pytest.mark.parametrize("runs", ["one run", "a run per change"])
def test_a_toasted_column_keeps_its_value_when_a_moved_key_is_updated_in_another_column(case, runs):
    state = as_change_stream(case, max_value_bytes=1_000_000)
    src = Debezium(case)
    steps = [
        lambda: src.insert({"id": 1, "email": "a@x", "balance": "1.00", "notes": LONG}),
        lambda: src.move(1, {"id": 2, "email": "a@x", "balance": "1.00", "notes": PLACEHOLDER}),
        lambda: src.update({"id": 2, "email": "b@x", "balance": "2.00", "notes": PLACEHOLDER}),
    ]
    for step in steps:
        step()
        if runs != "one run":
            src.flush()
            _ingest(case)
    src.flush()
    _ingest(case)
    assert state_of(case, state) == {2: ("b@x", pytest.approx(2), LONG)}
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
