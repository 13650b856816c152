"""The producer side of Kafka's guarantees, each claim checked by reading the topic back."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from eosflow.kafka_admin import ensure_topic
from eosflow_dev.produce import events
from eosflow_dev.produce.producer import Delivery, EventProducer, ProducerFenced, produce_stream
from eosflow_dev.produce.readback import read_topic
from eosflow_dev.produce.reconcile import reconcile

pytestmark = pytest.mark.integration


def _topic(settings, name: str, partitions: int) -> str:
    ensure_topic(settings.bootstrap_servers, name, partitions, log=lambda m: None)
    return name


def test_aborted_transactions_are_invisible_to_read_committed_only(running_stack, topic_name):
    s = running_stack
    topic = _topic(s, topic_name, 3)
    producer = EventProducer(
        s.bootstrap_servers,
        topic,
        Delivery(transactional_id=f"{topic}-tx", txn_size=50, abort_ratio=0.3),
        seed=11,
    )
    manifest = produce_stream(producer, events.generate(11, 2_000), seed=11)
    counts = manifest.counts()
    assert counts["aborted"] > 0 and counts["committed"] > 0  # the run really aborted some
    aborted_ids = {r.event_id for r in manifest.rows if r.status == "aborted"}
    committed_ids = {r.event_id for r in manifest.rows if r.status == "committed"}

    rc = {r.event_id for r in read_topic(s.bootstrap_servers, topic, "read_committed")}
    ru = {r.event_id for r in read_topic(s.bootstrap_servers, topic, "read_uncommitted")}
    assert rc == committed_ids
    assert not rc & aborted_ids
    assert ru == committed_ids | aborted_ids  # the aborted records are in the log all the same


def test_a_transaction_spanning_two_partitions_is_all_or_nothing(running_stack, topic_name):
    s = running_stack
    topic = _topic(s, topic_name, 2)
    producer = EventProducer(s.bootstrap_servers, topic, Delivery(transactional_id=f"{topic}-tx"), seed=5)
    batch = list(events.generate(5, 40))
    assert producer.send_transaction(batch[:20], abort=False) == "committed"
    assert producer.send_transaction(batch[20:], abort=True) == "aborted"
    producer.close()
    by_txn = defaultdict(set)
    for row in producer.manifest.rows:
        by_txn[row.txn].add(row.partition)
    assert by_txn[0] == {0, 1} and by_txn[1] == {0, 1}  # each transaction really spans both

    seen = defaultdict(set)
    for rec in read_topic(s.bootstrap_servers, topic, "read_committed"):
        seen[rec.partition].add(rec.event_id)
    committed = {e.event_id for e in batch[:20]}
    assert seen[0] | seen[1] == committed  # all of the committed one, on both partitions
    assert seen[0] and seen[1]
    assert not (seen[0] | seen[1]) & {e.event_id for e in batch[20:]}  # none of the aborted one


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(running_stack, topic_name):
    s = running_stack
    topic = _topic(s, topic_name, 2)
    delivery = Delivery(transactional_id=f"{topic}-shared")
    batch = list(events.generate(21, 90))
    first = EventProducer(s.bootstrap_servers, topic, delivery, seed=21)
    assert first.send_transaction(batch[:30]) == "committed"

    second = EventProducer(s.bootstrap_servers, topic, delivery, seed=22)  # init_transactions bumps the epoch
    with pytest.raises(ProducerFenced, match="fenced"):
        first.send_transaction(batch[30:60])
    assert {r.status for r in first.manifest.rows[30:]} == {"fenced"}
    with pytest.raises(ProducerFenced):
        first.send_transaction(batch[30:60])  # a zombie stays fenced
    assert second.send_transaction(batch[60:]) == "committed"
    second.close()

    visible = {r.event_id for r in read_topic(s.bootstrap_servers, topic, "read_committed")}
    assert visible == {e.event_id for e in batch[:30] + batch[60:]}


def test_idempotent_producer_keeps_per_partition_order_without_duplicates(running_stack, topic_name):
    s = running_stack
    topic = _topic(s, topic_name, 4)
    producer = EventProducer(
        s.bootstrap_servers,
        topic,
        Delivery(acks="all", idempotence=True, extra={"max.in.flight": "5"}),
        seed=31,
    )
    stream = list(events.generate(31, 5_000))
    manifest = produce_stream(producer, stream, seed=31)
    assert manifest.counts()["acknowledged"] == 5_000

    sent_order = {e.event_id: i for i, e in enumerate(stream)}
    records = read_topic(s.bootstrap_servers, topic, "read_committed")
    assert len(records) == 5_000
    assert len({r.event_id for r in records}) == 5_000  # no duplicates
    by_partition = defaultdict(list)
    for rec in records:  # read_topic returns (partition, offset) order
        by_partition[rec.partition].append(rec)
    assert len(by_partition) == 4
    for recs in by_partition.values():
        assert [r.offset for r in recs] == list(range(len(recs)))  # no gaps without transactions
        positions = [sent_order[r.event_id] for r in recs]
        assert positions == sorted(positions)  # the log keeps the order they were produced in


def test_manifest_matches_what_a_read_committed_consumer_reads(running_stack, topic_name, tmp_path):
    s = running_stack
    topic = _topic(s, topic_name, 3)
    producer = EventProducer(
        s.bootstrap_servers,
        topic,
        Delivery(transactional_id=f"{topic}-tx", txn_size=70, abort_ratio=0.25),
        seed=41,
    )
    path = produce_stream(producer, events.generate(41, 3_000), seed=41).write(tmp_path / "m.json")
    from eosflow_dev.produce.manifest import Manifest

    manifest = Manifest.read(path)
    records = read_topic(s.bootstrap_servers, topic, "read_committed")
    result = reconcile(manifest, records)
    assert result.ok, result.describe()
    assert result.expected == manifest.counts()["committed"] == len(records)
    assert {(r.partition, r.offset) for r in records} == {(r.partition, r.offset) for r in manifest.visible()}
    summary = json.loads(path.read_text())
    assert summary["counts"]["committed"] + summary["counts"]["aborted"] == 3_000
    assert sum(summary["visible_per_partition"].values()) == len(records)


def test_produce_cli_writes_a_manifest_and_refuses_bad_settings(running_stack, topic_name, tmp_path):
    import subprocess
    import sys

    eosflow = [sys.executable, "-m", "eosflow.cli"]
    bad = subprocess.run(
        [*eosflow, "produce", "--topic", topic_name, "--acks", "1"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert "needs acks=all" in bad.stderr and "--no-idempotence" in bad.stderr

    out = tmp_path / "cli.json"
    ok = subprocess.run(
        [
            *eosflow,
            "produce",
            "--topic",
            topic_name,
            "--partitions",
            "2",
            "--count",
            "500",
            "--transactional-id",
            f"{topic_name}-cli",
            "--txn-size",
            "50",
            "--abort-ratio",
            "0.2",
            "--seed",
            "9",
            "--manifest",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    body = json.loads(out.read_text())
    assert body["records"] == 500 and body["settings"]["seed"] == 9
    assert body["counts"]["committed"] + body["counts"]["aborted"] == 500
    assert len(read_topic(running_stack.bootstrap_servers, topic_name)) == body["counts"]["committed"]
