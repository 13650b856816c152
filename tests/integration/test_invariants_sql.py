"""The SQL invariant checks catch each kind of damage, and only the matching check fires.

One real ingest (two runs, so every partition has two ledger ranges); each test corrupts the
warehouse in one way inside a transaction, checks, and rolls back.
"""

from __future__ import annotations

import psycopg
import pytest

from eosflow.sinks.postgres import invariants

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ingested(running_stack, tmp_path_factory):
    import os

    from tests.integration.ingest_case import IngestCase

    c = IngestCase(running_stack, tmp_path_factory.mktemp("inv") / "pipelines.yml")
    old = os.environ.get("EOSFLOW_PIPELINES")
    os.environ["EOSFLOW_PIPELINES"] = str(c.config_path)
    try:
        c.produce(400, seed=201, partitions=2)
        c.ingest()
        c.produce(300, seed=202, partitions=2)
        c.ingest()
        assert c.violations() == []
        yield c
    finally:
        if old is None:
            os.environ.pop("EOSFLOW_PIPELINES", None)
        else:
            os.environ["EOSFLOW_PIPELINES"] = old


CORRUPTIONS = {
    "I1 unique coordinates": (  # the same record as output and as rejected
        "insert into eosflow.rejected "
        "(pipeline, kafka_topic, kafka_partition, kafka_offset, error, batch_id) "
        "select %(p)s, kafka_topic, kafka_partition, kafka_offset, 'dup', batch_id from {t} limit 1"
    ),
    "I2 contiguous ledger": (  # an overlapping range inside the first one
        "insert into eosflow.ledger (pipeline, topic, partition, start_offset, end_offset, kind, batch_id, "
        "records_read, rows_written, rows_rejected) "
        "select pipeline, topic, partition, start_offset + 1, start_offset + 1, 'lost', 'corrupt', 0, 0, 0 "
        "from eosflow.ledger where pipeline = %(p)s and partition = 0 order by start_offset limit 1"
    ),
    # An orphan far past every range. The partitioned target itself refuses a row no child's range
    # holds, so the damage is a child of its own, attached by hand, as a careless operator could.
    "I3 rows inside committed ranges": [
        "create table {t}_orphan (like {t} including defaults)",
        "insert into {t}_orphan select kafka_topic, kafka_partition, 999999, kafka_timestamp, kafka_key, "
        "kafka_headers, gen_random_uuid(), event_type, event_time, order_id, customer_id, amount_cents, "
        "currency, schema_version, batch_id, transform_version from {t} where kafka_partition = 0 limit 1",
        "alter table {t} attach partition {t}_orphan for values from ('{topic}', 0, 999999) "
        "to ('{topic}', 0, 1000000)",
    ],
    "I4 counts reconcile": (  # the ledger claims one record more than the output holds
        "update eosflow.ledger set records_read = records_read + 1, rows_written = rows_written + 1 "
        "where id = (select min(id) from eosflow.ledger where pipeline = %(p)s and kind = 'data')"
    ),
    "I5 positions match the ledger": (  # a position that fell behind its ledger
        "update eosflow.positions set next_offset = next_offset - 1 where pipeline = %(p)s and partition = 1"
    ),
}


@pytest.mark.parametrize("invariant", list(CORRUPTIONS))
def test_each_corruption_trips_exactly_its_invariant(ingested, invariant):
    with psycopg.connect(ingested.settings.warehouse_dsn) as conn:
        try:
            damage = CORRUPTIONS[invariant]
            for statement in [damage] if isinstance(damage, str) else damage:
                params = {"p": ingested.name} if "%(p)s" in statement else None
                conn.execute(statement.format(t=ingested.table, topic=ingested.topic), params)
            found = invariants.check(conn, ingested.pipeline)
        finally:
            conn.rollback()
    assert {v.invariant for v in found} == {invariant}, found
    assert all(v.detail for v in found)  # says where: topic, partition, offsets


def test_every_invariant_has_a_corruption_test():
    assert set(CORRUPTIONS) == set(invariants.CHECKS)
