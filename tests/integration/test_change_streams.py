"""A change stream into a state table (docs/DESIGN.md, "Change streams"), against the real broker, Spark and
Postgres: Debezium's envelopes (as its JSON converter writes them) and a keyed topic, each change once in the
changelog, each key's row its last change, whatever order runs, retries, replays and re-deliveries come in."""

from __future__ import annotations

import json
from decimal import Decimal

import psycopg
import pytest
from confluent_kafka import Producer

from eosflow.errors import PipelineConfigError
from eosflow.kafka_admin import ensure_topic
from eosflow.runners import job
from eosflow.schema.changes import PLACEHOLDER
from eosflow.verify import verify_pipeline

pytestmark = pytest.mark.integration
STATE_CHECKS = ("state_holds_last_changes", "state_holds_no_deleted_key", "state_holds_every_live_key")

COLUMNS = [
    {"name": "id", "type": "bigint", "required": True},
    {"name": "email", "type": "text", "required": True},
    {"name": "balance", "type": "numeric(12,2)"},
    {"name": "notes", "type": "text"},
]


def as_change_stream(case, changes: str = "debezium", **extra) -> str:
    """The case's pipeline as a change stream: changelog raw.<name>, state replica.<name>."""
    for key in ("business_key",):
        case.spec.pop(key, None)
    state = f"replica.{case.name}"
    case.write_config(columns=COLUMNS, changes=changes, primary_key=["id"], state_table=state, **extra)
    return state


class Source:
    """What the source table went through, as Debezium would send it: one topic, keyed by id."""

    def __init__(self, case, partitions: int = 2) -> None:
        self.case, self.lsn, self.partitions = case, 1000, partitions
        ensure_topic(case.settings.bootstrap_servers, case.topic, partitions, log=lambda m: None)
        self.producer = Producer(
            {"bootstrap.servers": case.settings.bootstrap_servers, "enable.idempotence": True}
        )
        self.sent: list[tuple[bytes, bytes | None, int]] = []

    def send(
        self, op: str, row: dict, before: dict | None = None, lsn: int | None = None, schema=False
    ) -> int:
        """One change; returns its LSN (a re-delivery passes the LSN it had)."""
        if lsn is None:
            self.lsn += 10
            lsn = self.lsn
        payload = {
            "op": op,
            "before": before if op != "d" else row,
            "after": row if op != "d" else None,
            "source": {"lsn": lsn, "ts_ms": 1764151200000 + lsn},
        }
        value = {"schema": {"type": "struct"}, "payload": payload} if schema else payload
        self._produce(row["id"], json.dumps(value).encode())
        if op == "d":
            self._produce(row["id"], None)  # Debezium's tombstone
        return lsn

    def truncate(self) -> None:
        self.lsn += 10
        value = {"op": "t", "before": None, "after": None, "source": {"lsn": self.lsn, "ts_ms": 1}}
        self.producer.produce(self.case.topic, value=json.dumps(value).encode(), partition=0)

    def _produce(self, id_: int | str, value: bytes | None) -> None:
        key = json.dumps({"id": id_}).encode()
        # A key's changes on one partition, as Kafka's keyed partitioning keeps them.
        partition = id_ % self.partitions if isinstance(id_, int) else len(id_) % self.partitions
        self.producer.produce(self.case.topic, key=key, value=value, partition=partition)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


def state_of(case, table: str) -> dict[int, tuple]:
    rows = case.query(f"select id, email, balance, notes from {table} order by id")
    return {r[0]: r[1:] for r in rows}


def test_a_debezium_stream_keeps_each_keys_last_change_exactly_and_a_rerun_changes_nothing(case):
    state = as_change_stream(case)
    src = Source(case)
    src.send("r", {"id": 1, "email": "a@x", "balance": "1.00", "notes": "snap"})
    src.send("c", {"id": 2, "email": "b@x", "balance": "2.00", "notes": "long text"}, schema=True)
    src.send("c", {"id": 3, "email": "c@x", "balance": None, "notes": None})
    src.send("u", {"id": 1, "email": "a2@x", "balance": "1.50", "notes": "snap"})
    src.send("u", {"id": 2, "email": "b2@x", "balance": "2.50", "notes": PLACEHOLDER})  # TOAST unchanged
    src.send("d", {"id": 3, "email": None, "balance": None, "notes": None})
    src.flush()
    summary = case.ingest()
    assert summary.outcome == "committed"
    assert state_of(case, state) == {
        1: ("a2@x", Decimal("1.50"), "snap"),
        2: ("b2@x", Decimal("2.50"), "long text"),  # the placeholder kept the stored value
    }
    changelog = case.query(f"select change_op, count(*) from {case.table} group by 1 order by 1")
    assert changelog == [("-", 1), ("c", 2), ("d", 1), ("r", 1), ("u", 2)]  # every change once, tombstone too
    assert case.rejected() == []
    assert case.ingest().records_read == 0
    assert state_of(case, state)[2] == ("b2@x", Decimal("2.50"), "long text")
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
    named = {c.name: c.invariant for c in result.checks if c.invariant}
    assert {named[n] for n in STATE_CHECKS} == {"S1", "S2", "S3"}


def test_an_optional_column_added_to_the_declaration_is_added_to_the_state_table_too(case):
    """The changelog gained an added column and the state table did not: the apply's INSERT named it."""
    state = as_change_stream(case)
    src = Source(case)
    src.send("c", {"id": 1, "email": "a@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    case.write_config(
        columns=[*COLUMNS, {"name": "vip", "type": "boolean"}],
        changes="debezium",
        primary_key=["id"],
        state_table=state,
    )
    src.send("u", {"id": 1, "email": "a@x", "balance": None, "notes": None, "vip": True})
    src.send("c", {"id": 2, "email": "b@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    assert case.query(f"select id, vip from {state} order by id") == [(1, True), (2, None)]
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()


def test_a_key_a_numeric_and_an_arrays_element_widened_widen_the_changelog_and_the_state_table(case):
    """The source's ids outgrew integer (ALTER ... TYPE bigint upstream): the declaration widens the key, a
    numeric and an array's element; the next run alters both tables in one transaction, and the changes
    from before and after keep their values. dbt's views on the tables (made by verify) are dropped for it
    and made again by the next verify; a user's view refuses the widening, naming it, and so does a state
    table altered by hand to a type that is no widening, before anything is read."""
    narrow = [
        {"name": "id", "type": "integer", "required": True},
        {"name": "email", "type": "text", "required": True},
        {"name": "balance", "type": "numeric(8,2)"},
        {"name": "tags", "type": "integer[]"},
    ]
    state = f"replica.{case.name}"
    case.spec.pop("business_key", None)
    case.write_config(columns=narrow, changes="debezium", primary_key=["id"], state_table=state)
    src = Source(case)
    src.send("c", {"id": 1, "email": "a@x", "balance": "123456.78", "tags": [1, 2]})
    src.send("c", {"id": 2, "email": "b@x", "balance": None, "tags": None})
    src.send("d", {"id": 2, "email": None, "balance": None, "tags": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    assert verify_pipeline(case.settings, case.name).ok  # dbt's staging views now read both tables

    wider = {"id": "bigint", "balance": "numeric(14,2)", "tags": "bigint[]"}
    case.write_config(
        columns=[{**c, "type": wider.get(c["name"], c["type"])} for c in narrow],
        changes="debezium",
        primary_key=["id"],
        state_table=state,
    )
    big = 2**40
    src.send("c", {"id": big, "email": "big@x", "balance": "123456789012.34", "tags": [big]})
    src.send("u", {"id": 1, "email": "a2@x", "balance": "123456.78", "tags": [1, 2]})
    src.flush()
    before = case.ledger()
    report = f"public.{case.name}_report"
    _execute(case, f"create view {report} as select id, balance from {state}")
    with pytest.raises(PipelineConfigError, match=f"while a view reads the table: {report}. Drop"):
        case.ingest()
    assert case.ledger() == before
    _execute(case, f"drop view {report}")

    logged: list[str] = []
    assert job.run(case.settings, case.name, None, log=logged.append).outcome == "committed"
    assert any(f"{state}: widened column id from integer to bigint" in m for m in logged), logged
    assert any("dropped dbt's view" in m and "stg_state" in m for m in logged), logged
    types = (
        "select format_type(atttypid, atttypmod) from pg_attribute "
        "where attrelid = %s::regclass and attname = %s"
    )
    for table in (case.table, state):
        assert [case.query(types, table, c)[0][0] for c in ("id", "balance", "tags")] == [
            "bigint",
            "numeric(14,2)",
            "bigint[]",
        ], table
    assert case.query(f"select id, email, balance, tags from {state} order by id") == [
        (1, "a2@x", Decimal("123456.78"), [1, 2]),
        (big, "big@x", Decimal("123456789012.34"), [big]),
    ]
    assert case.rejected() == []

    _execute(case, f"alter table {state} alter column balance type text")  # by hand: no widening back
    before = case.ledger()
    with pytest.raises(
        PipelineConfigError, match=f"column balance of state table {state} is text but declared"
    ):
        case.ingest()
    assert case.ledger() == before
    _execute(case, f"alter table {state} alter column balance type numeric(14,2) using balance::numeric")
    result = verify_pipeline(case.settings, case.name)  # dbt's views made again, over the wider columns
    assert result.ok, result.table()


def _execute(case, statement: str) -> None:
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        conn.execute(statement)


def test_verify_names_a_state_row_changed_behind_eosflows_back(case):
    """S1-S3 fail, naming the key, when the state table no longer is the changelog's last change per key."""
    state = as_change_stream(case)
    src = Source(case)
    for i in (1, 2, 3):
        src.send("c", {"id": i, "email": f"{i}@x", "balance": None, "notes": None})
    src.send("d", {"id": 3, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    with psycopg.connect(case.settings.warehouse_dsn, autocommit=True) as conn:
        conn.execute(f"update {state} set email = 'edited' where id = 1")
        conn.execute(f"delete from {state} where id = 2")
        conn.execute(f"insert into {state} select 3, 'back', null, null, null, null, 'x', 0, 0, 'b'")
    result = verify_pipeline(case.settings, case.name)
    failed = {c.name: c.rows for c in result.failed}
    assert set(failed) == set(STATE_CHECKS), result.table()
    assert failed["state_holds_last_changes"][0]["differing"] == ["email"]
    assert failed["state_holds_every_live_key"][0]["id"] == 2
    assert failed["state_holds_no_deleted_key"][0]["id"] == 3


def test_a_redelivered_older_change_never_overwrites_a_newer_one_across_runs(case):
    """Connect without exactly-once source support re-sends changes after a crash: later in Kafka, older in
    the database. The state follows the database's order (the LSN), not Kafka's."""
    state = as_change_stream(case)
    src = Source(case)
    old = src.send("c", {"id": 5, "email": "old@x", "balance": "5.00", "notes": None})
    src.send("u", {"id": 5, "email": "new@x", "balance": "6.00", "notes": None})
    deleted = src.send("c", {"id": 6, "email": "gone@x", "balance": None, "notes": None})
    src.send("d", {"id": 6, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    # The re-delivery, in a later run: the create of 5 and of 6 again, with their old LSNs.
    src.send("c", {"id": 5, "email": "old@x", "balance": "5.00", "notes": None}, lsn=old)
    src.send("c", {"id": 6, "email": "gone@x", "balance": None, "notes": None}, lsn=deleted)
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {5: ("new@x", Decimal("6.00"), None)}


def test_a_primary_key_update_moves_the_row_and_a_truncate_empties_what_came_before(case):
    state = as_change_stream(case)
    src = Source(case)
    for i in (10, 11, 12):
        src.send("c", {"id": i, "email": f"{i}@x", "balance": None, "notes": None})
    src.send("d", {"id": 10, "email": None, "balance": None, "notes": None})  # 10 becomes 20
    src.send("c", {"id": 20, "email": "10@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    assert sorted(state_of(case, state)) == [11, 12, 20]
    src.truncate()
    src.send("c", {"id": 30, "email": "after@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {30: ("after@x", None, None)}


def test_soft_deletes_keep_the_row_marked(case):
    state = as_change_stream(case, deletes="soft")
    src = Source(case)
    src.send("c", {"id": 1, "email": "a@x", "balance": None, "notes": "kept"})
    src.send("d", {"id": 1, "email": None, "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    assert case.query(f"select id, email, notes, deleted_at is not null from {state}") == [
        (1, "a@x", "kept", True)
    ]


def test_bad_changes_become_rejected_rows_and_hold_nothing_back(case):
    state = as_change_stream(case)
    src = Source(case)
    src.send("c", {"id": 1, "email": "a@x", "balance": None, "notes": None})
    producer = src.producer
    for value in (
        b'{"before": null, "after": {"id": 2}}',
        b'{"op": "z", "after": {"id": 2}}',
        b"not json",
        b'{"op": "c", "after": {"id": 2, "email": null}}',
        b'{"op": "d", "before": {"email": "x"}}',
    ):
        producer.produce(case.topic, key=b'{"id": 2}', value=value, partition=0)  # fmt: skip
    src.send("c", {"id": 4, "email": "d@x", "balance": "4.00", "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"
    assert sorted(state_of(case, state)) == [1, 4]
    reasons = sorted(r[-1] for r in case.query(
        "select kafka_offset, error from eosflow.rejected where pipeline = %s", case.name))  # fmt: skip
    assert len(reasons) == 5 and any("no op" in r for r in reasons) and any("op 'z'" in r for r in reasons)


def test_a_keyed_topic_is_a_change_stream_too(case):
    state = as_change_stream(case, changes="keyed", key="bigint")
    ensure_topic(case.settings.bootstrap_servers, case.topic, 1, log=lambda m: None)
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    for key, value in [
        (b"1", {"email": "a@x"}),
        (b"2", {"email": "b@x"}),
        (b"1", {"email": "a2@x"}),
        (b"2", None),
    ]:
        producer.produce(case.topic, key=key, value=None if value is None else json.dumps(value).encode())
    assert producer.flush(30) == 0
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {1: ("a2@x", None, None)}


def test_a_replay_recomputes_the_keys_of_its_range(case):
    from eosflow.ledger.backfill import BackfillRequest
    from eosflow.runners import backfill_run

    state = as_change_stream(case)
    src = Source(case, partitions=1)
    for i in range(1, 6):
        src.send("c", {"id": i * 2, "email": f"{i}@x", "balance": None, "notes": None})  # partition 0
    src.flush()
    assert case.ingest().outcome == "committed"
    before = state_of(case, state)
    case.write_config(transform_version="v2")
    request = BackfillRequest(case.name, "replay", (0,), 0, 5, chunk_size=100)
    done = backfill_run.run(case.settings, request, "replay-1", backfill_run.resolve(case.settings, request),
                            log=lambda m: None)  # fmt: skip
    assert [s.outcome for s in done] == ["committed"]
    assert state_of(case, state) == before
    versions = case.query(f"select distinct transform_version from {case.table}")
    assert versions == [("v2",)]


ROW_AVRO = {
    "type": "record",
    "name": "Value",
    "namespace": "shop.public.customers",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "email", "type": "string"},
        {
            "name": "balance",
            "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}],
        },
        {"name": "notes", "type": ["null", "string"], "default": None},
    ],
}
ENVELOPE_AVRO = {
    "type": "record",
    "name": "Envelope",
    "namespace": "shop.public.customers",
    "fields": [
        {"name": "before", "type": ["null", ROW_AVRO], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "fields": [{"name": "lsn", "type": ["null", "long"]}, {"name": "ts_ms", "type": "long"}],
            },
        },  # fmt: skip
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}


def test_debeziums_avro_envelope_through_the_registry_is_a_change_stream_too(case, schema_registry):
    """Debezium with Confluent's Avro converter: the envelope an Avro record (decimal.handling.mode=precise:
    a decimal logical type), its writer schema from the registry."""
    import dataclasses

    import fastavro

    from eosflow.schema.avro import SchemaRegistry, encode

    case.settings = dataclasses.replace(case.settings, schema_registry_url=schema_registry.url)
    state = as_change_stream(case, format="avro")
    schema_id = SchemaRegistry(schema_registry).register(f"{case.topic}-value", ENVELOPE_AVRO)
    parsed = fastavro.parse_schema(ENVELOPE_AVRO)

    def change(op: str, row: dict, lsn: int) -> bytes:
        image = {"before": row if op == "d" else None, "after": None if op == "d" else row}
        return encode(schema_id, parsed, {**image, "source": {"lsn": lsn, "ts_ms": 1}, "op": op, "ts_ms": 1})

    rows = [
        (b'{"id": 1}', change("c", {"id": 1, "email": "a@x", "balance": Decimal("1.10"), "notes": None}, 10)),
        (b'{"id": 2}', change("c", {"id": 2, "email": "b@x", "balance": None, "notes": "n"}, 20)),
        (b'{"id": 1}', change("u", {"id": 1, "email": "a2@x", "balance": Decimal("7.25"), "notes": "x"}, 30)),
        (b'{"id": 2}', change("d", {"id": 2, "email": "b@x", "balance": None, "notes": None}, 40)),
        (b'{"id": 2}', None),
    ]
    ensure_topic(case.settings.bootstrap_servers, case.topic, 1, log=lambda m: None)
    producer = Producer({"bootstrap.servers": case.settings.bootstrap_servers})
    for key, value in rows:
        producer.produce(case.topic, key=key, value=value)
    assert producer.flush(30) == 0
    assert case.ingest().outcome == "committed"
    assert state_of(case, state) == {1: ("a2@x", Decimal("7.25"), "x")}
    assert case.rejected() == []


def test_a_key_made_text_by_text_from_alters_both_tables_and_old_and_new_keys_stay_apart(case):
    """The source's ids became strings ('A-7'): the declaration makes the key text (`text_from: bigint`);
    the next run alters the changelog and the state table, each stored id becoming its text, and an old
    producer's numeric id then lands as the same text (an update of row 1, not a second row)."""
    state = f"replica.{case.name}"
    case.spec.pop("business_key", None)
    case.write_config(columns=COLUMNS, changes="debezium", primary_key=["id"], state_table=state)
    src = Source(case)
    src.send("c", {"id": 1, "email": "a@x", "balance": "1.50", "notes": None})
    src.send("c", {"id": 2, "email": "b@x", "balance": None, "notes": None})
    src.flush()
    assert case.ingest().outcome == "committed"

    made_text = [{**c, "type": "text", "text_from": "bigint"} if c["name"] == "id" else c for c in COLUMNS]
    case.write_config(columns=made_text, changes="debezium", primary_key=["id"], state_table=state)
    src.send("c", {"id": "A-7", "email": "new@x", "balance": None, "notes": None})
    src.send("u", {"id": 1, "email": "a2@x", "balance": "1.50", "notes": None})  # an old producer's id
    src.send("d", {"id": 2, "email": None, "balance": None, "notes": None})
    src.flush()
    logged: list[str] = []
    assert job.run(case.settings, case.name, None, log=logged.append).outcome == "committed"
    assert any(f"{state}: widened column id from bigint to text" in m for m in logged), logged
    assert case.column_types()["id"] == "text"
    assert case.query(f"select id, email from {state} order by id") == [("1", "a2@x"), ("A-7", "new@x")]
    assert case.rejected() == []
    result = verify_pipeline(case.settings, case.name)
    assert result.ok, result.table()
