"""A pipeline's lag in Kafka's own tool (issue 47; docs/DESIGN.md "Lag in Kafka's own tools"): after each
commit its positions are committed to its consumer group, which `kafka-consumer-groups --describe` (Kafka's
ConsumerGroupCommand, from the stack's Kafka jars) reads; a replay moves nothing; the group is never read
back; `consumer_group: false` reports nothing."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from eosflow.ledger.ranges import OffsetRange
from eosflow.runners import backfill_run, job
from eosflow_dev.runtime import jars, prereqs

pytestmark = pytest.mark.integration


def describe(settings, group: str) -> dict[int, tuple[int, int, int]]:
    """{partition: (current offset, log end offset, lag)} as Kafka's own kafka-consumer-groups prints it."""
    tool = [
        prereqs.java(),
        "-cp",
        jars.classpath(settings, "kafka"),
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server",
        settings.bootstrap_servers,
        "--describe",
        "--group",
        group,
    ]
    done = subprocess.run(tool, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows: dict[int, tuple[int, int, int]] = {}
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    header = next(i for i, cols in enumerate(lines) if cols[:1] == ["GROUP"])
    names = lines[header]
    for cols in lines[header + 1 :]:
        row = dict(zip(names, cols, strict=False))
        offsets = (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"])
        rows[int(row["PARTITION"])] = tuple(int(x) for x in offsets)
    return rows


def test_kafkas_own_tool_shows_the_lag_each_commit_leaves_and_a_replay_changes_nothing(case):
    """Two runs with records produced between: the tool's LAG is what waits; the group's offsets are the
    ledger's positions; a replay commits no report; a group reset behind eosflow's back is not read."""
    case.produce(90, seed=71, partitions=3)
    assert case.ingest().outcome == "committed"
    group = f"eosflow.{case.name}"
    first = describe(case.settings, group)
    assert sum(lag for _, _, lag in first.values()) == 0 and len(first) == 3
    assert sum(current for current, _, _ in first.values()) == 90

    case.produce(30, seed=72, partitions=3)  # waiting: the tool shows 30 of lag before the next run
    assert sum(lag for _, _, lag in describe(case.settings, group).values()) == 30

    # A reset behind eosflow's back (Kafka's own admin call) is never read as a position.
    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})
    reset = [TopicPartition(case.topic, p, 0) for p in range(3)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, reset)])[group].result(30)
    summary = case.ingest()
    assert summary.outcome == "committed" and summary.records_read == 30  # the ledger's positions
    after = describe(case.settings, group)
    assert sum(lag for _, _, lag in after.values()) == 0
    assert {p: current for p, (current, _, _) in after.items()} == {
        p: end for p, (_, end, _) in after.items()
    }
    assert case.violations() == []

    # A replay of what was read leaves positions, and the group, where they are.
    before = describe(case.settings, group)
    chunk = OffsetRange(case.topic, 0, 0, 10)
    replay = backfill_run.run_chunk(case.settings, case.name, "replay-1", chunk, "replay", log=lambda m: None)
    assert replay.outcome == "committed"
    assert describe(case.settings, group) == before


def test_a_group_named_in_pipelines_yml_gets_the_report_and_false_turns_it_off(case):
    case.write_config(consumer_group=f"team.{case.name}.lag")
    case.produce(20, seed=73, partitions=2)
    assert case.ingest().outcome == "committed"
    named = describe(case.settings, f"team.{case.name}.lag")
    assert sum(current for current, _, _ in named.values()) == 20

    case.write_config(consumer_group=False)
    case.produce(5, seed=74, partitions=2)
    assert case.ingest().outcome == "committed"
    assert sum(current for current, _, _ in describe(case.settings, f"team.{case.name}.lag").values()) == 20
    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})
    groups = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    assert f"eosflow.{case.name}" not in groups  # the default group was never written


def test_a_report_kafka_refuses_leaves_the_run_committed_with_a_warning(case):
    """A group with an active member cannot have its offsets altered: Kafka refuses, the run stays committed
    and its log says the group was not updated and why."""
    group = f"team.{case.name}.busy"
    case.write_config(consumer_group=group)
    case.produce(12, seed=75, partitions=1)
    member = Consumer({"bootstrap.servers": case.settings.bootstrap_servers, "group.id": group})
    member.subscribe([case.topic])
    try:
        for _ in range(60):  # until the member has joined (its first poll assigns the partition)
            member.poll(0.5)
            if member.assignment():
                break
        assert member.assignment(), "the member never joined its group"
        said: list[str] = []
        summary = job.run(case.settings, case.name, None, log=said.append)
    finally:
        member.close()
    assert summary.outcome == "committed" and case.violations() == []
    warning = [line for line in said if f"consumer group {group!r} was not updated" in line]
    assert warning and "nothing eosflow does reads it" in warning[0], said[-5:]
