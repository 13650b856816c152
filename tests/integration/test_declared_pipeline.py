"""A pipeline for a topic no code knows, declared in pipelines.yml alone (issue 14).

Two topics of the same schema, nested fields, arrays, numerics, jsonb, and a poison record for every
rule: every valid record lands typed exactly as produced, every poison one is a rejected row with its
reason, and nothing stops the run. Then the declaration evolves: an optional column is added in place,
anything else is refused before a record is read.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from confluent_kafka import Producer

from eosflow import pipelines
from eosflow.kafka_admin import ensure_topic
from eosflow.runners import job
from tests.clicks import click_columns

pytestmark = pytest.mark.integration

CLICKS = {
    "format": "json",
    "key": "text",
    "columns": click_columns("payload") + [{"name": "sizes", "type": "integer[]"}],
    "business_key": "click_id",
}


def click(i: int, **changes: object) -> dict:
    return {
        "click_id": str(uuid.UUID(int=i)),
        "url": f"https://shop.example/p/{i}",
        "ts": "2026-03-01T12:00:00.123456+02:00",
        "customer": {"id": f"c-{i}", "tier": "gold"},
        "n_items": i,
        "price": 9999999999.99,
        "kind": "buy",
        "tags": ["sale", 'say "hi"', "back\\slash", "{braces}", "comma,space ", "ünï"],
        "payload": {"nested": {"list": [1, 2.5, None, True]}, "text": "é\n"},
        "ok": True,
        "day": "2026-02-28",
        "score": -0.125,
        "sizes": [38, 40],
    } | changes


# (what is wrong, the value, the reason's beginning): one poison record per rule.
POISON = [
    ("missing required", click(0, click_id=None), "missing field: click_id"),
    ("nested path mistyped", click(0, customer={"id": 5}), "mistyped field: customer ($.customer.id)"),
    ("uuid mistyped", click(0, click_id="not-a-uuid"), "mistyped field: click_id (expected lower-case"),
    ("pattern", click(0, url="ftp://x"), "invalid value: url (does not match ^https?://)"),
    ("nul in text", click(0, url="https://\u0000"), "invalid value: url (holds a NUL character"),
    ("instant without zone", click(0, ts="2026-03-01T12:00:00"), "mistyped field: ts"),
    (
        "instant out of range",
        click(0, ts="0001-01-01T00:00:00+01:00"),
        "invalid value: ts (before 0001-01-01",
    ),
    ("min", click(0, n_items=-1), "invalid value: n_items (must be >= 0, got -1)"),
    ("integer as float", click(0, n_items=2.0), "mistyped field: n_items (expected 64-bit integer)"),
    ("numeric scale", click(0, price=1.005), "invalid value: price (more than 2 decimal places"),
    ("numeric precision", click(0, price=10**10), "invalid value: price (more than 10 digits before"),
    ("numeric as string", click(0, price="1.00"), "mistyped field: price (expected number)"),
    ("enum", click(0, kind="BUY"), "invalid value: kind (not one of view, add, buy)"),
    ("array element null", click(0, tags=["a", None]), "mistyped field: tags (expected array of string)"),
    ("array element nul", click(0, tags=["\u0000"]), "invalid value: tags (holds a NUL character"),
    ("integer array overflow", click(0, sizes=[2**31]), "mistyped field: sizes (expected array of 32-bit"),
    ("jsonb nul", click(0, payload={"a": "\u0000"}), "invalid value: payload (holds a NUL character"),
    ("boolean as number", click(0, ok=1), "mistyped field: ok (expected true or false)"),
    ("impossible date", click(0, day="2026-02-30"), "mistyped field: day (expected date string"),
    ("double as string", click(0, score="0.5"), "mistyped field: score (expected number)"),
]


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    ensure_topic(bootstrap, topic, 2, log=lambda m: None)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, partition=i % 2)
    assert producer.flush(30) == 0


def _encode(doc: dict) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode()


def test_a_json_topic_no_code_knows_lands_typed_from_its_declaration_alone(case):
    eu = f"{case.topic}.eu"
    case.write_config(topics=[case.topic, eu], **CLICKS)
    good = [click(i) for i in range(1, 6)] + [
        # optional columns absent or null are NULL
        {"click_id": str(uuid.UUID(int=6)), "url": "http://x", "ts": "2026-03-01T00:00:00Z", "kind": None},
        click(7, tags=[], sizes=[], payload=[1, "two"], price=0, n_items=0),
    ]
    bad_values = [_encode(doc) for _, doc, _ in POISON] + [b"not json", b"\xff\xfe", None, b"{" * 5000]
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", _encode(d)) for d in good[:4]])
    _produce(
        case.settings.bootstrap_servers,
        eu,
        [(b"k", _encode(d)) for d in good[4:]] + [(b"k", v) for v in bad_values],
    )

    summary = case.ingest()

    assert summary.outcome == "committed"
    assert case.violations() == []
    rows = case.query(
        "select kafka_topic, click_id, url, ts, customer, n_items, price, kind, tags, payload, ok, day, "
        f"score, sizes from {case.table} order by click_id"
    )
    assert [r[0] for r in rows] == [case.topic] * 4 + [eu] * 3
    expected_first = (
        uuid.UUID(int=1),
        "https://shop.example/p/1",
        datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC),
        "c-1",
        1,
        Decimal("9999999999.99"),
        "buy",
        ["sale", 'say "hi"', "back\\slash", "{braces}", "comma,space ", "ünï"],
        {"nested": {"list": [1, 2.5, None, True]}, "text": "é\n"},
        True,
        date(2026, 2, 28),
        -0.125,
        [38, 40],
    )
    assert rows[0][1:] == expected_first
    assert rows[5][1:] == (uuid.UUID(int=6), "http://x", datetime(2026, 3, 1, tzinfo=UTC)) + (None,) * 10
    assert rows[6][5:9] == (0, Decimal("0.00"), "buy", [])
    assert rows[6][9] == [1, "two"] and rows[6][13] == []

    reasons = [r[2] for r in case.rejected()]
    assert len(reasons) == len(bad_values)
    for what, _, reason in POISON:
        assert sum(r.startswith(reason) for r in reasons) == 1, (what, reason, reasons)
    for reason in ("not JSON", "not UTF-8", "null value", "oversized: 5000 bytes > 4096"):
        assert reason in reasons

    declared = case.column_types()
    assert {k: declared[k] for k in ("click_id", "price", "tags", "payload", "day", "score", "sizes")} == {
        "click_id": "uuid",
        "price": "numeric(12,2)",
        "tags": "text[]",
        "payload": "jsonb",
        "day": "date",
        "score": "double precision",
        "sizes": "integer[]",
    }


def test_an_optional_column_added_to_the_declaration_is_added_to_the_target_with_earlier_rows_null(case):
    spec = {"columns": [{"name": "id", "type": "bigint", "required": True}], "business_key": "id"}
    case.write_config(**spec)
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b'{"id": 1, "note": "a"}')])
    assert case.ingest().outcome == "committed"

    case.write_config(columns=spec["columns"] + [{"name": "note", "type": "text"}])
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b'{"id": 2, "note": "b"}')])
    assert case.ingest().outcome == "committed"

    assert case.query(f"select id, note from {case.table} order by id") == [(1, None), (2, "b")]
    assert case.violations() == []
    # Each row records the declaration it was checked against; eosflow.declarations keeps both.
    assert case.query(f"select id, declaration_version from {case.table} order by id") == [(1, 1), (2, 2)]
    versions = case.query(
        "select version, declaration->'columns' from eosflow.declarations where pipeline = %s order by 1",
        case.name,
    )
    assert [(v, len(columns)) for v, columns in versions] == [(1, 1), (2, 2)]


def test_a_widening_a_relaxed_column_and_a_removed_one_apply_on_the_next_run_and_lose_nothing(case):
    """docs/DESIGN.md, "Declarations that evolve": integer to bigint, numeric(10,2) to numeric(14,3), a
    required column made optional and one removed, all on the next run; every committed row keeps its
    values and the invariants hold across the change."""
    first = [
        {"name": "id", "type": "integer", "required": True},
        {"name": "price", "type": "numeric(10,2)", "required": True},
        {"name": "sku", "type": "text", "required": True},
    ]
    case.write_config(columns=first, business_key="id")
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b'{"id": 1, "price": 12.5, "sku": "a"}')])
    assert case.ingest().outcome == "committed"

    evolved = [
        {"name": "id", "type": "bigint", "required": True},
        {"name": "price", "type": "numeric(14,3)"},
    ]
    case.write_config(columns=evolved, business_key="id")
    big = 2**40  # no integer holds it
    _produce(
        case.settings.bootstrap_servers,
        case.topic,
        [(b"k", f'{{"id": {big}, "price": 12345678901.125}}'.encode()), (b"k", b'{"id": 3, "sku": "c"}')],
    )
    logged: list[str] = []
    summary = job.run(case.settings, case.name, None, log=logged.append)

    assert summary.outcome == "committed"
    assert case.column_types()["id"] == "bigint" and case.column_types()["price"] == "numeric(14,3)"
    assert case.query(f"select id, price, sku from {case.table} order by id") == [
        (1, Decimal("12.500"), "a"),
        (3, None, None),  # price optional now; sku no longer declared: NULL from now on
        (big, Decimal("12345678901.125"), None),
    ]
    assert case.violations() == []
    assert any("widened column id from integer to bigint" in m for m in logged), logged
    assert any("column sku is no longer declared" in m for m in logged), logged

    # Narrowing back is refused before anything is read, naming the statement, and nothing is written.
    before = case.ledger()
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b'{"id": 4}')])
    case.write_config(columns=[{"name": "id", "type": "integer", "required": True}], business_key="id")
    done = case.ingest_process()
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"alter table {case.table} alter column id type integer using id::integer" in done.stderr
    assert case.ledger() == before


def test_a_rename_is_refused_naming_the_statement_and_after_it_the_run_goes_on(case):
    """A new column reading what a removed one read is a rename: refused before reading, naming the
    ALTER TABLE that keeps every row's value; once the user ran it, the declaration fits."""
    case.write_config(columns=[{"name": "amount", "type": "bigint", "required": True}], business_key=None)
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b'{"amount": 1}')])
    assert case.ingest().outcome == "committed"

    case.write_config(columns=[{"name": "total", "type": "bigint", "required": True, "source": "$.amount"}])
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b'{"amount": 2}')])
    done = case.ingest_process()
    assert done.returncode == 2, done.stderr[-2000:]
    statement = f"alter table {case.table} rename column amount to total"
    assert f"column total reads what amount read: a rename of amount (`{statement}`" in done.stderr

    _execute(case, statement)  # the user runs it
    assert case.ingest().outcome == "committed"
    assert case.query(f"select total from {case.table} order by total") == [(1,), (2,)]
    assert case.violations() == []


def _execute(case, statement: str) -> None:
    import psycopg

    with psycopg.connect(case.settings.warehouse_dsn) as conn:
        conn.execute(statement)


def test_a_retry_planned_under_another_declaration_is_refused_and_commits_nothing(case):
    from eosflow.runners import job

    case.write_config(columns=[{"name": "id", "type": "bigint", "required": True}], business_key=None)
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b'{"id": 1}')])
    plan, _ = job.prepare(case.settings, case.name, "run-1", log=lambda m: None)  # the plan task
    assert plan.declaration_version == 1
    case.write_config(
        columns=[{"name": "id", "type": "bigint", "required": True}, {"name": "n", "type": "text"}]
    )

    done = case.ingest_process("--run-id", "run-1")  # the Spark task, after the change

    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "declaration changed since batch" in last and "(version 1 then, 2 now)" in last, last
    assert case.ledger() == []
    case.write_config(columns=[{"name": "id", "type": "bigint", "required": True}])  # restored: it finishes
    assert case.ingest_process("--run-id", "run-1").returncode == 0
    assert case.query(f"select id, declaration_version from {case.table}") == [(1, 1)]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            {"columns": [{"name": "id", "type": "text", "required": True}]},
            "column id is bigint in the target but declared text (declare `text_from: bigint`",
        ),
        (
            {
                "columns": [
                    {"name": "id", "type": "bigint", "required": True},
                    {"name": "n", "type": "text", "required": True},
                ]
            },
            "required column n is new",
        ),
        (
            {"columns": [{"name": "id", "type": "integer", "required": True}]},
            "column id is bigint in the target but declared integer",
        ),
    ],
)
def test_a_declaration_change_that_would_break_committed_rows_is_refused_before_reading(case, change, reason):
    case.write_config(columns=[{"name": "id", "type": "bigint", "required": True}], business_key=None)
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b'{"id": 1}')])
    assert case.ingest().outcome == "committed"
    before = case.ledger()
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b'{"id": 2}')])

    case.write_config(**change)
    done = case.ingest_process()

    assert done.returncode == 2, done.stderr
    assert reason in done.stderr and "re-ingest into a new table: declare a new pipeline" in done.stderr
    assert case.ledger() == before


def test_a_bytes_key_is_kept_exactly_even_when_it_is_not_text(case):
    case.write_config(
        key="bytes", columns=[{"name": "id", "type": "bigint", "required": True}], business_key=None
    )
    keys = [b"\x00\x01\xff", (7).to_bytes(8, "big"), None, "ключ".encode()]
    _produce(
        case.settings.bootstrap_servers,
        case.topic,
        [(k, f'{{"id": {i}}}'.encode()) for i, k in enumerate(keys)],
    )
    assert case.ingest().outcome == "committed"
    assert [
        bytes(k) if k is not None else None
        for (k,) in case.query(f"select kafka_key from {case.table} order by id")
    ] == keys
    assert pipelines.load(case.settings, case.name, case.config_path).schema.key == "bytes"


def test_a_python_transform_named_by_entry_point_reads_a_topic_no_declaration_can(case):
    # The README's worked example: pipe-separated lines, read by eosflow.examples.pipe_clicks:parse,
    # registered as the entry point `pipe_clicks` (pyproject.toml), run inside the Spark tasks.
    case.write_config(
        transform="pipe_clicks",
        columns=[
            {"name": "click_id", "type": "uuid", "required": True},
            {"name": "url", "type": "text", "required": True, "pattern": "^https?://"},
            {"name": "ts", "type": "timestamptz", "required": True},
            {"name": "price", "type": "numeric(12,2)", "min": 0},
        ],
        business_key="click_id",
    )
    lines = [
        f"{uuid.UUID(int=i)}|https://shop.example/p/{i}|{1767225600000 + i}|{100 * i}".encode()
        for i in range(1, 9)
    ] + [
        b"not|enough",
        f"{uuid.UUID(int=99)}|ftp://x|0|1".encode(),
        f"{uuid.UUID(int=98)}|https://x|300000000000000|1".encode(),
    ]
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", v) for v in lines])

    assert case.ingest().outcome == "committed"

    rows = case.query(f"select click_id, url, ts, price from {case.table} order by click_id")
    assert len(rows) == 8
    assert rows[0] == (
        uuid.UUID(int=1),
        "https://shop.example/p/1",
        datetime(2026, 1, 1, 0, 0, 0, 1000, tzinfo=UTC),
        Decimal("1.00"),
    )
    assert sorted(r[2] for r in case.rejected()) == [
        "invalid value: url (does not match ^https?://)",
        "rejected by transform: expected 4 fields separated by |, got 2",
        "transform raised OverflowError: date value out of range",
    ]
    assert case.violations() == []


def test_a_python_transform_that_cannot_be_imported_is_refused_before_anything_is_read(case):
    case.write_config(
        transform="no_such_package.module:parse", columns=[{"name": "id", "type": "text"}], business_key=None
    )
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", b"x")])

    done = case.ingest_process()

    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot import 'no_such_package.module'" in done.stderr.strip().splitlines()[-1]
    assert case.ledger() == []


def test_a_pipeline_pointed_at_another_table_after_it_committed_is_refused_before_planning(case):
    """Once accepted silently: the new table lacked every committed row, and verify failed I4 on them."""
    case.produce(60, seed=881, partitions=2)
    assert case.ingest().outcome == "committed"
    before = case.ledger()
    old = case.table
    case.write_config(target_table=f"{old}_v2")
    done = case.ingest_process()
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"committed into {old}, and its declaration now writes {old}_v2" in done.stderr
    assert "declare a new pipeline" in done.stderr
    assert case.ledger() == before
    case.write_config(target_table=old)  # restored: runs on
    assert case.ingest_process().returncode == 0


def test_a_pipeline_that_no_longer_lists_a_topic_it_committed_from_is_refused(case):
    other = f"{case.topic}_eu"
    case.write_config(topics=[case.topic, other])
    case.produce(30, seed=882, partitions=1)
    from eosflow.kafka_admin import ensure_topic

    ensure_topic(case.settings.bootstrap_servers, other, 1, log=lambda m: None)  # empty: a first range
    assert case.ingest().outcome == "committed"
    case.write_config(topics=[case.topic])
    done = case.ingest_process()
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"committed records of topic(s) ['{other}']" in done.stderr


def test_an_output_changed_before_anything_committed_is_simply_the_output(case):
    case.produce(20, seed=883, partitions=1)
    killed = case.ingest_process(EOSFLOW_CRASH_AT="after_plan")  # recorded its output, committed nothing
    assert killed.returncode == -9, killed.stderr[-2000:]
    case.write_config(target_table=f"{case.table}_fixed")
    assert case.ingest().outcome == "committed"
    assert case.query(f"select count(*) from {case.table}") == [(20,)]
