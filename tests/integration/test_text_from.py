"""A column made text from another type by the declaration's explicit choice (`text_from`; docs/DESIGN.md,
"Declarations that evolve"), against the real Postgres.

The ALTER writes each stored value as Postgres's text of the old type; the records read after the change,
a replay of the old ones included, must give exactly that text, or a replay would change committed rows.
So eosflow.schema.text_from's texts are held to Postgres's own output of a column altered the way the sink
alters it, value by value, and then a pipeline's rows to the rows its replay gives.
"""

from __future__ import annotations

import math
import random
import struct
import uuid
from decimal import Decimal

import psycopg
import pytest

from eosflow.runners import job
from eosflow.schema import ddl
from eosflow.schema.text_from import text_from
from eosflow.schema.types import BAD, parse_type
from tests.integration.test_declared_pipeline import _produce

pytestmark = pytest.mark.integration


def _doubles(n: int, seed: int) -> list[float]:
    """Doubles from random bits (every exponent and digit count), the finite ones, and the edges."""
    rng = random.Random(seed)
    found = [0.0, -0.0, 0.1, 1e15, 1e16, 123456789012345.0, 1234567890123456.0, 1e-4, 1.5e-5, 5e-324, 1e308]
    while len(found) < n:
        (x,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if math.isfinite(x):
            found.append(x)
    found += [rng.uniform(-1e6, 1e6) for _ in range(200)] + [
        float(rng.randint(-(10**17), 10**17)) for _ in range(200)
    ]
    return found


# (the old type, values as a record carries them: JSON numbers, booleans, strings)
VALUES = {
    "bigint": [0, -1, 2**63 - 1, -(2**63), 42],
    "integer": [0, 2**31 - 1, -(2**31), 7],
    "double": _doubles(2000, 47),
    "boolean": [True, False],
    "timestamptz": [
        "2026-11-28T04:00:00Z",
        "2026-11-28T04:00:00.120Z",
        "2026-11-28T05:00:00.000001+01:00",
        "0099-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999999Z",
        "2026-03-01T12:00:00.123456789-08:30",
    ],
    "date": ["2026-11-28", "0001-01-01", "9999-12-31"],
    "uuid": [str(uuid.UUID(int=i * 7919)) for i in range(5)],
    "numeric(10,2)": [Decimal("12.5"), Decimal("0"), Decimal("-99999999.99"), 3, 0.1],
    "numeric(20,6)": [Decimal("12345678901234.5"), Decimal("1e-6"), 10**13],
}


@pytest.mark.parametrize("old", sorted(VALUES))
def test_each_values_text_is_what_postgres_writes_when_the_column_is_altered(running_stack, old) -> None:
    column = parse_type(old)
    made = text_from(old)
    typed = [column.accept(v) for v in VALUES[old]]
    assert BAD not in typed
    with psycopg.connect(running_stack.warehouse_dsn) as conn, conn.transaction():
        conn.execute(f"create temporary table t (i integer, v {column.postgres}) on commit drop")
        with conn.cursor().copy("copy t (i, v) from stdin") as copy:
            for i, value in enumerate(typed):
                copy.write_row((i, value))
        conn.execute("set timezone = 'America/Los_Angeles'; set datestyle = 'SQL, DMY'")  # a user's session
        for statement in ddl.text_output_settings():  # as the sink's prepare does, in its transaction
            conn.execute(statement)
        conn.execute("alter table t alter column v type text")
        stored = [v for (v,) in conn.execute("select v from t order by i")]
    assert [made.accept(v) for v in VALUES[old]] == stored


def test_a_column_made_text_takes_its_old_values_as_postgres_wrote_them_and_a_replay_changes_no_row(case):
    first = [
        {"name": "id", "type": "bigint", "required": True},
        {"name": "amount", "type": "double"},
        {"name": "at", "type": "timestamptz"},
        {"name": "ok", "type": "boolean"},
    ]
    case.write_config(columns=first, business_key="id")
    old = [
        b'{"id": 1, "amount": 1e15, "at": "2026-11-28T05:00:00.5+01:00", "ok": true}',
        b'{"id": 2, "amount": 0.1, "at": "2026-11-28T04:00:00Z", "ok": false}',
    ]
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", v) for v in old])
    assert case.ingest().outcome == "committed"

    # Without the explicit choice, text is no widening of a double: refused, naming the choice.
    made_text = [
        {"name": "id", "type": "text", "required": True, "text_from": "bigint"},
        {"name": "amount", "type": "text", "text_from": "double"},
        {"name": "at", "type": "text", "text_from": "timestamptz"},
        {"name": "ok", "type": "text", "text_from": "boolean"},
    ]
    without_choice = [
        {k: v for k, v in c.items() if (c["name"], k) != ("amount", "text_from")} for c in made_text
    ]
    case.write_config(columns=without_choice, business_key="id")
    refused = case.ingest_process()
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "column amount is double in the target but declared text" in refused.stderr
    assert "declare `text_from: double` on the column" in refused.stderr

    case.write_config(columns=made_text, business_key="id")
    new = [
        b'{"id": "A-3", "amount": "n/a", "at": "yesterday", "ok": "maybe"}',
        b'{"id": 4, "amount": 2.5, "at": "2026-01-01T00:00:00Z", "ok": true}',  # an old producer's record
    ]
    _produce(case.settings.bootstrap_servers, case.topic, [(b"k", v) for v in new])
    logged: list[str] = []
    assert job.run(case.settings, case.name, None, log=logged.append).outcome == "committed"
    assert {c: case.column_types()[c] for c in ("id", "amount", "at", "ok")} == dict.fromkeys(
        ("id", "amount", "at", "ok"), "text"
    )
    assert any("widened column amount from double to text" in m for m in logged), logged
    rows = f"select id, amount, at, ok from {case.table} order by kafka_partition, kafka_offset"
    expected = sorted(
        [
            ("1", "1e+15", "2026-11-28 04:00:00.5+00", "true"),  # altered by Postgres
            ("2", "0.1", "2026-11-28 04:00:00+00", "false"),
            ("A-3", "n/a", "yesterday", "maybe"),  # strings: themselves
            ("4", "2.5", "2026-01-01 00:00:00+00", "true"),  # the old type's values: as Postgres writes them
        ]
    )
    assert sorted(case.query(rows)) == expected
    assert case.rejected() == []
    assert case.violations() == []

    # A replay of everything, the old records under the new declaration: the same rows.
    case.replay_all()
    assert sorted(case.query(rows)) == expected
    assert case.violations() == []
