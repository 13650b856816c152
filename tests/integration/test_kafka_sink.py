"""A `sink: kafka` pipeline against the real broker and Spark: each source partition's range and its
offsets in one Kafka transaction, read back read_committed as a downstream consumer would."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from eosflow.ledger.mirror import FENCED
from eosflow.sinks.kafka import produce
from eosflow.verify import verify_pipeline
from tests.kafka_reader import read_all, sources

pytestmark = pytest.mark.integration

BAD = [b"not json", b'{"event_id": 1}', None]


def produce_bad(case, partition: int) -> None:
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    for value in BAD:
        producer.produce(case.topic, value=value, key=b"bad", partition=partition)
    producer.flush(10)


def test_a_kafka_sink_produces_every_record_once_with_its_offsets(case):
    case.as_kafka_sink(output_key="customer_id")
    manifest = case.produce(300, seed=16, partitions=3)
    produce_bad(case, partition=1)
    summary = case.ingest()
    assert summary.outcome == "committed"

    out = read_all(case.settings, case.output_topic)
    dead = read_all(case.settings, f"{case.output_topic}.rejected")
    assert len(out) == len(manifest.visible()) == 300 and len(dead) == len(BAD)
    assert set(sources(out).values()) == {1} and set(sources(dead).values()) == {1}
    assert {m.partition for m in manifest.visible()} | {1} == {p for _, p, _ in sources(out) + sources(dead)}
    body = json.loads(out[0].value())
    assert out[0].key() == body["customer_id"].encode()  # output_key: the declared column
    assert {e for e in (json.loads(m.value())["event_id"] for m in out)} == {
        a.event_id for a in manifest.visible()
    }
    assert [dict(m.headers())["eosflow-error"] for m in dead if m.value() is None] == [b"null value"]

    # The group's offsets are the positions; the ledger mirrors them with the same counts.
    ledger = case.ledger()
    assert (
        sum(r[4] for r in ledger) == 303
        and sum(r[5] for r in ledger) == 300
        and sum(r[6] for r in ledger) == 3
    )
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()

    again = case.ingest()  # nothing new: no transaction, nothing produced twice
    assert again.records_read == 0
    # A run with nothing new commits its (empty) plan, as a warehouse sink's does: it used to say ALREADY
    # COMMITTED, of a run id never seen before (found by the Kafka sink's randomized schedule).
    assert again.outcome == "committed"
    assert len(read_all(case.settings, case.output_topic)) == 300


def test_a_task_killed_inside_its_transaction_never_reaches_a_read_committed_reader(case):
    case.as_kafka_sink()
    case.produce(200, seed=17, partitions=2)
    killed = case.ingest_process("--run-id", "zombie", EOSFLOW_CRASH_AT="in_kafka_transaction")
    assert killed.returncode != 0, killed.stdout + killed.stderr
    assert "SIGKILL at in_kafka_transaction" in killed.stderr

    output = case.output_topic
    uncommitted = read_all(case.settings, output, "read_uncommitted")
    assert uncommitted, "the killed task produced its records inside its open transaction"
    # The open transaction holds back a read_committed reader (its last stable offset) until aborted.
    assert read_all(case.settings, output) == []
    listed = _kafka_transactions(case)
    assert listed.returncode == 1 and "held back by an open transaction" in listed.stdout, listed
    aborted = _kafka_transactions(case, "--abort")
    assert aborted.returncode == 0 and "no open transaction" in aborted.stdout, aborted
    assert read_all(case.settings, output) == []  # aborted: the zombie's records never become visible

    done = case.ingest_process("--run-id", "zombie")  # the retry fences the zombie and aborts its transaction
    assert done.returncode == 0, done.stdout + done.stderr
    committed = read_all(case.settings, output)
    assert len(committed) == 200 and set(sources(committed).values()) == {1}
    assert len(read_all(case.settings, output, "read_uncommitted")) > len(
        committed
    )  # the aborted copies stay in the log
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_zombie_run_is_fenced_after_another_run_committed(case):
    case.as_kafka_sink()
    case.produce(100, seed=18, partitions=1)
    from eosflow.runners import job

    first, _ = job.prepare(case.settings, case.name, "first", log=lambda m: None)
    second, _ = job.prepare(case.settings, case.name, "second", log=lambda m: None)
    assert first.ranges == second.ranges  # both planned from the same committed offsets
    assert case.ingest("second").outcome == "committed"
    with pytest.raises(Exception, match="fenced in Kafka"):
        case.ingest("first")
    assert len(read_all(case.settings, case.output_topic)) == 100
    assert produce.group_id(case.name) == f"eosflow.{case.name}"


def test_a_replay_into_a_kafka_sink_is_refused_before_anything_is_written(case):
    from eosflow.ledger.backfill import BackfillError
    from eosflow.ledger.ranges import OffsetRange
    from eosflow.runners import backfill_run

    case.as_kafka_sink()
    case.produce(50, seed=19, partitions=1)
    case.ingest()
    plans = case.query("select count(*) from eosflow.plans where pipeline = %s", case.name)
    with pytest.raises(BackfillError, match="second copy"):
        backfill_run.run_chunk(
            case.settings, case.name, "replay-1", OffsetRange(case.topic, 0, 0, 50), "replay"
        )
    assert case.query("select count(*) from eosflow.plans where pipeline = %s", case.name) == plans
    assert len(read_all(case.settings, case.output_topic)) == 50


def _kafka_transactions(case, *args: str):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "kafka", "transactions", "--pipeline", case.name, *args],
        env=case.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_zombie_paused_inside_its_transactions_is_fenced_by_a_newer_run(case, tmp_path):
    case.as_kafka_sink()
    case.produce(300, seed=20, partitions=2)
    zombie = case.raced_while_paused("in_kafka_transaction", tmp_path)
    assert zombie.returncode == 3, zombie.stderr[-3000:]  # fenced, as a zombie of a warehouse sink is
    assert "fenced" in zombie.stderr
    committed = read_all(case.settings, case.output_topic)
    assert len(committed) == 300 and set(sources(committed).values()) == {1}


def test_a_transaction_timeout_above_the_brokers_limit_is_refused_before_planning(case):
    from eosflow.sinks.kafka.topics import TransactionTimeoutError

    case.as_kafka_sink(transaction_timeout_ms=3_600_000)  # the broker allows 900,000 (15 min) by default
    case.produce(10, seed=21, partitions=1)
    with pytest.raises(
        TransactionTimeoutError, match=r"transaction_timeout_ms 3600000 is above broker .*900000"
    ):
        case.ingest()
    assert case.query("select count(*) from eosflow.plans where pipeline = %s", case.name) == [(0,)]
    done = case.ingest_process()
    assert done.returncode == 2 and "transaction.max.timeout.ms" in done.stderr, done.stderr[-2000:]


def _forget_the_group(case) -> None:
    """What Kafka's offset retention does to an idle partition, or an operator's cleanup: no offsets."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})
    for future in admin.delete_consumer_groups([produce.group_id(case.name)], request_timeout=30).values():
        future.result()


def test_a_group_that_forgot_its_offsets_is_restored_from_the_ledger_and_nothing_repeats(case):
    """Once every run after the group lost its offsets was FENCED, claiming another run committed: forever."""
    case.as_kafka_sink()
    first = case.produce(200, seed=31, partitions=2)
    assert case.ingest().outcome == "committed"
    _forget_the_group(case)
    more = case.produce(100, seed=32, partitions=2)
    lines: list[str] = []
    from eosflow.runners import job

    assert job.run(case.settings, case.name, log=lines.append).outcome == "committed"
    assert sum("had forgotten its offset" in line for line in lines) == 2  # one per partition
    out = read_all(case.settings, case.output_topic)
    assert len(out) == len(first.visible()) + len(more.visible()) and set(sources(out).values()) == {1}
    assert verify_pipeline(case.settings, case.name).ok


def test_a_forgotten_offset_behind_records_the_ledger_never_saw_is_refused(case):
    """A range committed in Kafka, its run killed before the ledger's mirror, then the offsets lost: the
    ledger's position is behind the output, and restoring it would produce that range twice."""
    from eosflow.ledger.mirror import LedgerBehindError

    case.as_kafka_sink()
    case.produce(100, seed=33, partitions=1)
    assert case.ingest().outcome == "committed"
    case.produce(50, seed=34, partitions=1)
    killed = case.ingest_process(EOSFLOW_CRASH_AT="in_commit")  # committed in Kafka, not mirrored
    assert killed.returncode == -9, killed.stderr[-2000:]
    _forget_the_group(case)
    before = len(read_all(case.settings, case.output_topic))
    with pytest.raises(LedgerBehindError, match=r"already holds 50 record\(s\) from that partition"):
        case.ingest()
    assert len(read_all(case.settings, case.output_topic)) == before == 150


def test_records_above_message_max_bytes_become_dead_letters_instead_of_failing_every_retry(case):
    """A dead letter larger than the producer's message.max.bytes failed the task, run after run."""
    case.as_kafka_sink(max_value_bytes=3_000_000)
    case.write_config(
        columns=[{"name": "id", "type": "text"}, {"name": "body", "type": "text"}], business_key=None
    )
    case.create_topic(1, {"max.message.bytes": "3000000"})
    big = "x" * 1_500_000
    producer = Producer(
        {"bootstrap.servers": case.settings.bootstrap_servers, "message.max.bytes": 3_000_000}
    )
    for value in (
        b'{"id": "small", "body": "s"}',
        json.dumps({"id": "huge", "body": big}).encode(),
        big.encode(),
    ):
        producer.produce(case.topic, value=value, partition=0)
    producer.flush(30)
    assert case.ingest().outcome == "committed"
    out = read_all(case.settings, case.output_topic)
    dead = read_all(case.settings, f"{case.output_topic}.rejected")
    assert [json.loads(m.value())["id"] for m in out] == ["small"]
    reasons = {
        int(dict(m.headers())["eosflow-source-offset"]): dict(m.headers())["eosflow-error"] for m in dead
    }
    assert sorted(reasons) == [1, 2] and all(m.value() is None for m in dead)
    assert reasons[1].startswith(b"output the record is") and b"above message.max.bytes" in reasons[1]
    assert b"not JSON" in reasons[2] or b"invalid" in reasons[2]
    assert b"its value stays in the source" in reasons[2]
    assert verify_pipeline(case.settings, case.name).ok


def test_a_record_above_the_output_topics_max_message_bytes_is_a_dead_letter_not_a_failed_run(case):
    """The output topic's own max.message.bytes (below the producer's) refused the record at the broker:
    the commit failed, run after run."""
    from eosflow.kafka_admin import ensure_topic

    case.as_kafka_sink(max_value_bytes=100_000)
    case.write_config(
        columns=[{"name": "id", "type": "text"}, {"name": "body", "type": "text"}], business_key=None
    )
    case.create_topic(1)
    ensure_topic(case.settings.bootstrap_servers, case.output_topic, 1, config={"max.message.bytes": "8192"})
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    for value in (
        b'{"id": "small", "body": "s"}',
        json.dumps({"id": "big", "body": "x" * 20_000}).encode(),
    ):
        producer.produce(case.topic, value=value, partition=0)
    producer.flush(30)
    assert case.ingest().outcome == "committed"
    assert [json.loads(m.value())["id"] for m in read_all(case.settings, case.output_topic)] == ["small"]
    (dead,) = read_all(case.settings, f"{case.output_topic}.rejected")
    assert dead.value() is None
    reason = dict(dead.headers())["eosflow-error"]
    assert f"{case.output_topic}'s max.message.bytes (8,192)".encode() in reason
    assert verify_pipeline(case.settings, case.name).ok


def test_a_keyless_output_record_for_a_compacted_topic_is_a_dead_letter_not_a_failed_run(case):
    """A compacted output topic refuses a record without a key: the commit failed, run after run."""
    from eosflow.kafka_admin import ensure_topic

    case.as_kafka_sink()
    case.write_config(columns=[{"name": "id", "type": "text"}], business_key=None)
    case.create_topic(1)
    ensure_topic(case.settings.bootstrap_servers, case.output_topic, 1, config={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    producer.produce(case.topic, key=b"k", value=b'{"id": "keyed"}', partition=0)
    producer.produce(case.topic, value=b'{"id": "keyless"}', partition=0)
    producer.flush(30)
    assert case.ingest().outcome == "committed"
    assert [json.loads(m.value())["id"] for m in read_all(case.settings, case.output_topic)] == ["keyed"]
    (dead,) = read_all(case.settings, f"{case.output_topic}.rejected")
    assert json.loads(dead.value())["id"] == "keyless"
    assert f"{case.output_topic} is compacted".encode() in dict(dead.headers())["eosflow-error"]
    assert verify_pipeline(case.settings, case.name).ok


def test_a_compacted_dead_letter_topic_is_refused_before_planning(case):
    from eosflow.errors import PipelineConfigError
    from eosflow.kafka_admin import ensure_topic

    case.as_kafka_sink()
    case.produce(10, seed=24, partitions=1)
    dead = f"{case.output_topic}.rejected"
    ensure_topic(case.settings.bootstrap_servers, dead, 1, config={"cleanup.policy": "compact"})
    with pytest.raises(PipelineConfigError, match="cleanup.policy delete"):
        case.ingest()
    assert case.query("select count(*) from eosflow.plans where pipeline = %s", case.name) == [(0,)]


def test_a_range_slower_than_its_transaction_timeout_stops_the_run_saying_so(case, tmp_path):
    """A range that took longer than transaction_timeout_ms was aborted by the broker, reported FENCED
    (no other run existed) and re-planned identically forever. The broker's abort is only noticed at its
    next check for timed-out transactions (every 10 s by default), hence the long pause."""
    import subprocess
    import sys
    import threading
    import time

    case.as_kafka_sink(transaction_timeout_ms=1000)
    manifest = case.produce(50, seed=35, partitions=1)
    env = case.env(EOSFLOW_PAUSE_AT="in_kafka_transaction", EOSFLOW_FAULT_DIR=str(tmp_path))

    def resume_later() -> None:
        deadline = time.monotonic() + 240
        while not (tmp_path / "in_kafka_transaction.paused").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(15)  # well past the 1 s timeout and the broker's 10 s check
        (tmp_path / "in_kafka_transaction.resume").write_text("go")

    threading.Thread(target=resume_later, daemon=True).start()
    slow = subprocess.run(
        [sys.executable, "-m", "eosflow.cli", "ingest", "--pipeline", case.name],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert slow.returncode == 2, slow.stderr[-3000:]
    assert "TIMED OUT" in slow.stderr and "above transaction_timeout_ms (1000)" in slow.stderr
    assert "Lower max_records_per_partition, or raise transaction_timeout_ms" in slow.stderr
    assert read_all(case.settings, case.output_topic) == []
    case.write_config(transaction_timeout_ms=60_000)
    assert case.ingest().outcome == "committed"
    assert len(read_all(case.settings, case.output_topic)) == len(manifest.visible())


def test_verify_passes_after_retention_deleted_source_records_already_produced(case):
    """Found by the randomized schedule: once retention deleted source records a Kafka sink had already
    produced (any topic older than its retention), `eosflow verify` failed for good, calling every record
    of those ranges "names no committed source record", and read nothing of a range starting below the log
    start. What retention took cannot be compared with the source; it still lies in a committed range."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    case.as_kafka_sink()
    manifest = case.produce(60, seed=36, partitions=1)
    assert case.ingest().outcome == "committed"
    case.produce(20, seed=37, partitions=1)  # in the same partition: a second committed range
    assert case.ingest().outcome == "committed"
    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})
    tp = TopicPartition(case.topic, 0, 30)
    admin.delete_records([tp])[tp].result(timeout=30)  # what retention does, inside the first range

    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
    assert "below the log start" in result.table()  # says what it could not compare, and why
    assert len(read_all(case.settings, case.output_topic)) == len(manifest.visible()) + 20


def test_a_topic_re_created_with_fewer_partitions_is_refused_not_a_kafka_error(case):
    """Found by the randomized schedule: deleting a topic drops the group's offsets of it, so the next run
    took them for forgotten and tried to restore an offset of a partition the new topic does not have:
    an UNKNOWN_TOPIC_OR_PART traceback instead of the refusal every other sink gives."""
    from confluent_kafka.admin import AdminClient

    from eosflow.ledger.planner import TopicRecreatedError

    case.as_kafka_sink()
    case.produce(60, seed=38, partitions=3)
    assert case.ingest().outcome == "committed"
    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})
    admin.delete_topics([case.topic], operation_timeout=30)[case.topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while case.topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.3)
    case.produce(10, seed=39, partitions=1)  # the same name again, one partition
    before = len(read_all(case.settings, case.output_topic))
    with pytest.raises(TopicRecreatedError, match="was deleted and re-created"):
        case.ingest()
    assert len(read_all(case.settings, case.output_topic)) == before


@pytest.mark.parametrize("learns", ["while producing", "at commit"])
def test_a_range_fenced_while_its_records_wait_in_the_queue_ends_fenced_not_failed(case, learns):
    """A newer holder of the transactional id fences this attempt while its records are still queued:
    librdkafka purges them (`_PURGE_QUEUE` delivery reports), which failed the task instead of FENCED."""
    from eosflow.runners import job

    case.as_kafka_sink()
    case.produce(20, seed=23, partitions=1)
    plan, _ = job.prepare(case.settings, case.name, "purged", log=lambda m: None)
    pipeline = case.pipeline
    (part,) = plan.partitions
    zombie = produce.RangeTransaction(
        case.settings.kafka, case.name, pipeline.delivery, pipeline.sink, part, plan.batch_id
    )
    newer = produce.RangeTransaction(
        case.settings.kafka, case.name, pipeline.delivery, pipeline.sink, part, plan.batch_id
    )
    try:
        assert zombie.open() == (None, "")
        assert newer.open() == (None, "")  # init_transactions: the zombie's epoch is now stale
        offsets = range(part.range.start, part.range.end)
        for offset in offsets[:10]:
            zombie.produce(case.output_topic, b"k", b'{"n": 1}', offset)
        deadline = time.monotonic() + 30
        while learns == "while producing" and zombie.fatal is None and time.monotonic() < deadline:
            zombie.poll(0.5)  # learns it is fenced: what is queued is purged
        assert learns == "at commit" or zombie.fatal is not None
        for offset in offsets[10:]:  # records after that are not produced
            zombie.produce(case.output_topic, b"k", b'{"n": 1}', offset)
        zombie.count(list(range(part.range.start, part.range.end)), part.range.span, 0)
        outcome = zombie.commit()
    finally:
        zombie.close()
        newer.producer.abort_transaction(10)
        newer.close()
    assert outcome.outcome == FENCED, outcome
    assert "fenced" in outcome.detail
    assert read_all(case.settings, case.output_topic) == []
