"""A change stream into a Kafka sink (docs/DESIGN.md, "State in Kafka"), against the real broker and Spark:
the compacted output topic is the state, each key's last record its last change by the source's order,
whatever order runs, re-deliveries and kills come in. Everything eosflow wrote is read back with
confluent-kafka's own consumer, never eosflow's reader."""

from __future__ import annotations

import json
import re
import secrets
import time
import uuid
from decimal import Decimal

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from eosflow.errors import PipelineConfigError
from eosflow.kafka_admin import ensure_topic
from eosflow.schema.changes import PLACEHOLDER
from eosflow.sources.kafka.offsets import TopicMissingError
from eosflow.verify import verify_pipeline
from eosflow_dev.stack import connect
from tests.integration.test_change_streams import COLUMNS, Source

pytestmark = pytest.mark.integration


def as_state_topic(case, **extra) -> str:
    """The case's pipeline as a change stream whose state is the compacted topic out.<name>."""
    for key in ("business_key", "target_table"):
        case.spec.pop(key, None)
    spec = {"columns": COLUMNS, "changes": "debezium", "primary_key": ["id"], "sink": "kafka"}
    case.write_config(**(spec | {"output_topic": f"out.{case.name}"} | extra))
    return case.output_topic


def read_back(case, topic: str) -> list:
    """Every committed record of `topic`, partition by partition, with confluent-kafka's consumer."""
    bootstrap = case.settings.bootstrap_servers
    partitions = sorted(
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic).topics[topic].partitions
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test.{case.name}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    records, open_ = [], set(partitions)
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])
        for _ in range(600):
            if not open_:
                break
            for m in consumer.consume(1000, timeout=0.1):
                if m.error() is None:
                    records.append(m)
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    open_.discard(m.partition())
    finally:
        consumer.close()
    assert not open_, f"{topic} partitions {open_} never reached their end"
    return records


def last_per_key(records) -> dict[int, dict | None]:
    """id -> the key's last record's row (None: a tombstone), as compaction would leave it."""
    last = {}
    for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
        last[json.loads(m.key())["id"]] = None if m.value() is None else json.loads(m.value())
    return last


def headers(m) -> dict[str, str]:
    return {k: v.decode() for k, v in m.headers() or []}


def row(id_: int, email: str, balance: str | None = None, notes: str | None = None) -> dict:
    return {"id": id_, "email": email, "balance": balance, "notes": notes}


def test_each_keys_last_record_is_its_last_change_with_tombstones_for_deletes(case):
    output = as_state_topic(case)
    src = Source(case)
    src.send("r", row(1, "a@x", "1.00", "snap"))
    src.send("c", row(2, "b@x", "2.00", "long text"), schema=True)
    src.send("c", row(3, "c@x"))
    src.send("u", row(1, "a2@x", "1.50", "snap"))
    src.send("u", row(2, "b2@x", "2.50", PLACEHOLDER))  # TOAST unchanged, filled from the create above
    src.send("d", row(3, None))
    src.flush()
    summary = case.ingest()
    assert summary.outcome == "committed"

    records = read_back(case, output)
    assert last_per_key(records) == {
        1: {"id": 1, "email": "a2@x", "balance": 1.5, "notes": "snap"},
        2: {"id": 2, "email": "b2@x", "balance": 2.5, "notes": "long text"},
        3: None,
    }
    assert [json.loads(m.key()) for m in records if m.value() is None] == [{"id": 3}]  # one tombstone
    for m in records:  # each in its source partition's number, naming its change
        h = headers(m)
        assert m.partition() == int(h["eosflow-source-partition"]) == json.loads(m.key())["id"] % 2
        assert h["eosflow-change-op"] in "cru d" and h["eosflow-change-position"].endswith(
            f"/{m.partition()}/{h['eosflow-source-offset']}"
        )
    assert read_back(case, f"{output}.rejected") == []
    # 7 read (the delete's Debezium tombstone too): 6 produced, the tombstone written as nothing.
    assert sum(r[4] for r in case.ledger()) == 7 and sum(r[5] for r in case.ledger()) == 7
    assert len(records) == 6

    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, output)]).values()
    assert future.result(timeout=30)["cleanup.policy"].value == "compact"
    assert case.ingest().records_read == 0
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_redelivered_older_change_is_superseded_and_a_toast_column_comes_from_the_last_run(case):
    """Connect without exactly-once source support re-sends changes after a crash: later in Kafka, older
    (or the same) in the database. The topic follows the database's order; the older change goes to the
    dead-letter topic as superseded. An update that left a TOASTed column out takes it from the record the
    previous run wrote."""
    output = as_state_topic(case)
    src = Source(case)
    old = src.send("c", row(5, "old@x", "5.00", "toasted"))
    latest = src.send("u", row(5, "new@x", "6.00", "toasted"))
    deleted = src.send("c", row(6, "gone@x"))
    src.send("d", row(6, None))
    src.flush()
    assert case.ingest().outcome == "committed"

    src.send("c", row(5, "old@x", "5.00", "toasted"), lsn=old)  # re-delivered: older
    src.send("u", row(5, "new@x", "6.00", "toasted"), lsn=latest)  # re-delivered: the same LSN
    src.send("c", row(6, "gone@x"), lsn=deleted)  # re-delivered after its delete
    src.send("u", row(5, "newest@x", "7.00", PLACEHOLDER))  # TOAST unchanged: from the restored record
    src.flush()
    assert case.ingest().outcome == "committed"

    assert last_per_key(read_back(case, output)) == {
        5: {"id": 5, "email": "newest@x", "balance": 7.0, "notes": "toasted"},
        6: None,
    }
    dead = read_back(case, f"{output}.rejected")
    reasons = sorted(headers(m)["eosflow-error"] for m in dead)
    assert len(reasons) == 3 and all(r.startswith("superseded") for r in reasons), reasons
    assert any(f"position {latest}/1/" in r for r in reasons)  # names the position it lost to
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_run_killed_inside_its_transactions_and_its_retry_produce_each_change_once(case):
    output = as_state_topic(case)
    src = Source(case)
    for i in range(1, 41):
        src.send("c", row(i, f"{i}@x", notes=f"text {i}"))
    src.flush()
    assert case.ingest().outcome == "committed"
    for i in range(1, 41):
        src.send("u", row(i, f"{i}.2@x", notes=PLACEHOLDER))
    for i in range(1, 41, 4):
        src.send("d", row(i, None))
    src.flush()
    killed = case.ingest_process("--run-id", "zombie", EOSFLOW_CRASH_AT="in_kafka_transaction")
    assert killed.returncode != 0 and "SIGKILL at in_kafka_transaction" in killed.stderr, killed.stderr[
        -2000:
    ]
    done = case.ingest_process(
        "--run-id", "zombie"
    )  # fences the killed one, restores past its aborted records
    assert done.returncode == 0, done.stderr[-3000:]

    records = read_back(case, output)
    named = [(headers(m)["eosflow-source-partition"], headers(m)["eosflow-source-offset"]) for m in records]
    assert len(named) == len(set(named)) == 40 + 40 + 10  # each change once
    expected = {i: None if i % 4 == 1 else row(i, f"{i}.2@x", notes=f"text {i}") for i in range(1, 41)}
    assert last_per_key(records) == expected
    assert read_back(case, f"{output}.rejected") == []
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_topic_that_does_not_compact_or_has_fewer_partitions_and_output_key_are_refused(case):
    output = as_state_topic(case)
    src = Source(case, partitions=2)
    src.send("c", row(1, "a@x"))
    src.flush()
    ensure_topic(case.settings.bootstrap_servers, output, 2, log=lambda m: None)
    with pytest.raises(
        PipelineConfigError, match=rf"{output}, which does not compact.*cleanup.policy=compact"
    ):
        case.ingest()
    ensure_topic(
        case.settings.bootstrap_servers,
        f"{output}.b",
        1,
        config={"cleanup.policy": "compact"},
        log=lambda m: None,
    )
    case.write_config(output_topic=f"{output}.b")
    with pytest.raises(PipelineConfigError, match=r"has 1 partition\(s\) and its source .* has 2"):
        case.ingest()
    case.write_config(output_topic=output, output_key="email")
    with pytest.raises(PipelineConfigError, match="remove output_key"):
        case.ingest()
    assert read_back(case, output) == [] and read_back(case, f"{output}.b") == []
    assert case.ledger() == []


def test_verify_names_a_record_written_behind_eosflows_back(case):
    output = as_state_topic(case)
    src = Source(case)
    src.send("c", row(1, "a@x"))
    src.send("c", row(2, "b@x"))
    src.flush()
    assert case.ingest().outcome == "committed"
    assert verify_pipeline(case.settings, case.name).ok

    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    producer.produce(output, key=b'{"id":2}', value=b'{"id":2,"email":"forged@x"}', partition=0)
    assert producer.flush(30) == 0
    forged = max(m.offset() for m in read_back(case, output) if m.partition() == 0)
    result = verify_pipeline(case.settings, case.name)
    failed = {f.name: f.detail for f in result.failed}
    assert set(failed) == {"each key's last record is its last change", "nothing else in the output"}, (
        result.table()
    )
    assert (
        f'key {{"id":2}} in partition 0: the record at offset {forged} names no source'
        in failed["each key's last record is its last change"]
    )


def test_a_table_debezium_streams_is_the_state_topic_and_a_moved_key_keeps_its_toast_column(
    case, connect_server, settings
):
    """Real Debezium (exactly-once source support) into a compacted topic: after a snapshot, updates that
    leave a TOASTed column out, a delete and a primary-key move within the partition (the create carries
    the old key; its TOASTed column comes from the old key's row), each key's last record equals the
    source row, read from the source database."""
    table = f"customers_{uuid.uuid4().hex[:8]}"
    prefix = f"cdc{uuid.uuid4().hex[:8]}"
    name = f"eosflow-test-{prefix}"
    conninfo = connect_server.source_conninfo
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(
            f"create table {table} (id bigint primary key, email text not null, balance numeric(12,2), "
            "notes text)"
        )
    as_state_topic(case, topics=[f"{prefix}.public.{table}"], max_value_bytes=1_000_000)
    big = secrets.token_hex(6000)  # 12 kB that do not compress: stored out of line (TOAST)

    def source_rows() -> dict[int, dict]:
        with psycopg.connect(conninfo) as conn:
            rows = conn.execute(f"select id, email, balance, notes from {table}").fetchall()
        return {r[0]: {"id": r[0], "email": r[1], "balance": r[2], "notes": r[3]} for r in rows}

    def until_equal(timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                assert case.ingest().outcome == "committed"
            except TopicMissingError:  # Debezium makes the topic with its first change
                assert time.monotonic() < deadline, "Debezium never made the table's topic"
                time.sleep(1.0)
                continue
            last = {}
            for m in sorted(read_back(case, case.output_topic), key=lambda m: (m.partition(), m.offset())):
                doc = None if m.value() is None else json.loads(m.value(), parse_float=Decimal)
                last[json.loads(m.key())["id"]] = doc
            replica = {k: v for k, v in last.items() if v is not None}
            if replica == source_rows():
                return
            dead = [
                headers(m)["eosflow-error"][:200] for m in read_back(case, f"{case.output_topic}.rejected")
            ]
            assert time.monotonic() < deadline, (
                f"never equal: {sorted(replica)} vs {sorted(source_rows())}, {dead}"
            )
            time.sleep(1.0)

    with psycopg.connect(conninfo, autocommit=True) as conn, conn.transaction():
        for i in range(1, 6):
            conn.execute(
                f"insert into {table} values (%s, %s, %s, %s)", (i, f"{i}@x", Decimal(f"{i}.25"), big)
            )
    connect.register_postgres_source(settings, name, [table], prefix)
    try:
        connect.wait_running(settings, name)
        until_equal()  # the snapshot: op r
        with psycopg.connect(conninfo, autocommit=True) as conn, conn.transaction():
            conn.execute(f"update {table} set email = 'changed@x', balance = 99.99 where id = 1")
            conn.execute(f"delete from {table} where id = 3")
            conn.execute(f"update {table} set id = 40 where id = 4")  # the key moves, notes left out
            conn.execute(f"insert into {table} (id, email) values (6, 'six@x')")
        until_equal()
        records = read_back(case, case.output_topic)
        moved = [m for m in records if json.loads(m.key())["id"] == 40]
        assert moved and json.loads(moved[-1].value())["notes"] == big
        assert read_back(case, f"{case.output_topic}.rejected") == []
        result = verify_pipeline(case.settings, case.name)
        assert result.ok, result.table()
    finally:
        connect.delete(settings, name)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"drop table if exists {table}")


def test_an_avro_state_topic_takes_a_toast_column_from_the_previous_runs_avro_record(case, schema_registry):
    """output_format: avro, the row image's columns alone registered under <topic>-value; an update that
    left a TOASTed column out in a later run takes it from the Avro record the topic holds. Decoded with
    confluent-kafka's own Avro deserializer and registry client."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    output = as_state_topic(case, output_format="avro")
    src = Source(case)
    src.send("c", row(1, "a@x", "1.00", "toasted"))
    src.send("c", row(2, "b@x", None, "kept"))
    src.flush()
    assert case.ingest().outcome == "committed"
    src.send("u", row(1, "a2@x", "2.00", PLACEHOLDER))
    src.flush()
    assert case.ingest().outcome == "committed"

    client = SchemaRegistryClient({"url": schema_registry.url, **dict(schema_registry.config)})
    fields = [
        f["name"]
        for f in json.loads(client.get_latest_version(f"{output}-value").schema.schema_str)["fields"]
    ]
    assert fields == ["id", "email", "balance", "notes"]  # the image: no change columns
    deserialize = AvroDeserializer(client)
    last = {}
    for m in read_back(case, output):
        last[json.loads(m.key())["id"]] = deserialize(
            m.value(), SerializationContext(output, MessageField.VALUE)
        )
    assert last == {
        1: {"id": 1, "email": "a2@x", "balance": Decimal("2.00"), "notes": "toasted"},
        2: {"id": 2, "email": "b@x", "balance": None, "notes": "kept"},
    }
    assert read_back(case, f"{output}.rejected") == []
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_keyed_topic_is_a_state_topic_too_ordered_by_its_offsets(case):
    """changes: keyed: the key is the primary key, a null value deletes; there is no source position, so
    each key's changes are in their partition's order, and the position header says so."""
    output = as_state_topic(case, changes="keyed")
    ensure_topic(case.settings.bootstrap_servers, case.topic, 2, log=lambda m: None)
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True})

    def send(id_: int, value: dict | None) -> None:
        body = None if value is None else json.dumps(value).encode()
        producer.produce(case.topic, key=str(id_).encode(), value=body, partition=id_ % 2)

    send(1, row(1, "a@x"))
    send(2, row(2, "b@x"))
    send(1, row(1, "a2@x"))
    assert producer.flush(30) == 0
    assert case.ingest().outcome == "committed"
    send(2, None)
    send(1, row(1, "a3@x", notes="n"))
    assert producer.flush(30) == 0
    assert case.ingest().outcome == "committed"

    records = read_back(case, output)
    assert last_per_key(records) == {1: row(1, "a3@x", notes="n"), 2: None}
    assert all(headers(m)["eosflow-change-position"].startswith("-/") for m in records)
    assert {headers(m)["eosflow-change-op"] for m in records} == {"u", "d"}
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_compaction_keeps_a_deleted_keys_tombstone_and_verify_accounts_for_what_it_removed(case):
    """Kafka's log cleaner, made eager on the output topic, removes a key's older records: a later run's
    restore still holds each key's last change, and a deleted key's tombstone stays (eosflow creates the
    topic with a century's delete.retention.ms), so a re-delivered older create of the key is superseded
    instead of bringing its row back. A key deleted after an operator shortened delete.retention.ms loses
    its tombstone too, and verify counts its changes as compacted away, not lost. It waits for the cleaner,
    which wakes every second on the stack's broker (log.cleaner.backoff.ms; Kafka's default is 15 s, which
    made this test 65-90 s) and takes a tombstone on a later pass than the records it hides."""
    output = as_state_topic(case)
    src = Source(case)
    first = src.send("c", row(1, "a@x", notes="t"))
    src.send("u", row(1, "a2@x", notes="t"))
    src.send("u", row(1, "a3@x", notes="t"))
    created = src.send("c", row(2, "b@x"))
    src.send("d", row(2, None))
    src.send("c", row(3, "c@x"))
    src.flush()
    assert case.ingest().outcome == "committed"
    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})
    resource = ConfigResource(ResourceType.TOPIC, output)
    (future,) = admin.describe_configs([resource]).values()
    assert int(future.result(timeout=30)["delete.retention.ms"].value) >= 100 * 365 * 86_400_000

    def alter(**config: str) -> None:
        entries = [
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in config.items()
        ]
        for f in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, output, incremental_configs=entries)]
        ).values():
            f.result(timeout=30)

    def compact_until(done) -> None:
        deadline = time.monotonic() + 100
        while True:  # each run rolls the partitions' segments (segment.ms), so the cleaner can take old ones
            time.sleep(2)
            src.send("c", row(10 + int(time.monotonic()) % 2, "roll@x"))  # one key per partition, again
            src.flush()
            assert case.ingest().outcome == "committed"
            left = [json.loads(m.key())["id"] for m in read_back(case, output)]
            if done(left):
                return
            assert time.monotonic() < deadline, f"the log cleaner never compacted {output} so: {left}"

    alter(segment_ms="100", min_cleanable_dirty_ratio="0.01", min_compaction_lag_ms="0")
    compact_until(lambda left: left.count(1) == 1)
    assert last_per_key(read_back(case, output))[2] is None  # the tombstone stayed
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
    assert not re.search(r"(?<![\d,])0 compacted away", result.table())  # some were: "10 compacted away" is

    src.send("c", row(1, "a@x", notes="t"), lsn=first)  # re-delivered, older than what the key holds
    src.send("c", row(2, "b@x"), lsn=created)  # re-delivered after the key's delete
    src.send("u", row(1, "a4@x", notes=PLACEHOLDER))
    src.flush()
    assert case.ingest().outcome == "committed"
    last = last_per_key(read_back(case, output))
    assert last[1] == row(1, "a4@x", notes="t") and last[2] is None
    dead = read_back(case, f"{output}.rejected")
    assert len(dead) == 2 and all(headers(m)["eosflow-error"].startswith("superseded") for m in dead)

    # A delete after the operator shortened delete.retention.ms loses its tombstone, and verify accounts for
    # it. (Whether an older tombstone, key 2's, outlives the shortening depends on when the cleaner first met
    # it (KIP-534), which cannot be observed: two fresh-clone runs removed it, so nothing is asserted of it.)
    alter(delete_retention_ms="100")
    src.send("d", row(3, None))
    src.flush()
    compact_until(lambda left: 3 not in left)
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_verify_passes_after_retention_deleted_the_source_changes_of_keys_the_topic_holds(case):
    """The state topic keeps a key's row for as long as the key lives; the source topic's retention
    deletes the change that wrote it. That record cannot be compared with its change: it still lies in a
    committed range, and verify says how many were checked that way."""
    output = as_state_topic(case)
    src = Source(case)
    src.send("c", row(1, "a@x"))  # partition 1, offset 0: retention takes it below
    src.send("c", row(3, "c@x"))  # partition 1, offset 1: retention takes it, its update stays
    src.send("c", row(2, "b@x"))
    src.flush()
    assert case.ingest().outcome == "committed"
    src.send("u", row(3, "c2@x"))  # partition 1, offset 2
    src.flush()
    assert case.ingest().outcome == "committed"
    admin = AdminClient({"bootstrap.servers": case.settings.bootstrap_servers})
    tp = TopicPartition(case.topic, 1, 2)
    admin.delete_records([tp])[tp].result(timeout=30)  # what retention does

    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
    assert "below the log start" in result.table()
    assert last_per_key(read_back(case, output)) == {1: row(1, "a@x"), 2: row(2, "b@x"), 3: row(3, "c2@x")}
