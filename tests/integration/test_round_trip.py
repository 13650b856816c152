"""The round trip Kafka -> warehouse -> Kafka -> warehouse on the real stack, as `eosflow demo` runs it:
ingest orders, build the dbt marts (orders_published among them), publish that mart, ingest the
published topic into a second table, check every row arrived once; then again with more orders, where
the incremental mart appends only the new events and the publisher sends only those."""

from __future__ import annotations

import psycopg
import pytest
import yaml

from eosflow import pipelines, round_trip
from eosflow.publish.declaration import load_publisher
from eosflow.publish.run import publish
from eosflow.runners import job
from eosflow.verify import verify_pipeline
from tests import horizon

pytestmark = pytest.mark.integration


def test_published_mart_rows_arrive_in_the_second_table_once_and_a_rerun_sends_only_new_rows(case):
    settings, back = case.settings, f"{case.name}_back"
    mart = f"analytics_{case.name}.orders_published"  # the marts' schema of a pipeline not named orders
    case.config_path.write_text(
        yaml.safe_dump(
            {
                "pipelines": {
                    case.name: case.spec,
                    back: case.spec | {"topics": [f"published.{case.name}"], "target_table": f"raw.{back}"},
                },
                "publishers": {
                    case.name: {
                        "table": mart,
                        "topic": f"published.{case.name}",
                        "id": "event_id",
                        "key": "order_id",
                    }
                },
            }
        )
    )
    publisher = load_publisher(settings, case.name, case.config_path)
    second = pipelines.load(settings, back, case.config_path)

    def one_trip(new_events: int, seed: int) -> int:
        case.produce(new_events, seed=seed, partitions=2)
        assert case.ingest().outcome == "committed"
        assert verify_pipeline(settings, case.name).ok  # dbt build: I1-I6, then the marts
        horizon.settle(settings.warehouse_dsn, publisher)  # another worker's open transaction
        sent = publish(settings, publisher, log=lambda m: None).rows
        assert job.run(settings, back, log=lambda m: None).outcome == "committed"
        return sent

    assert one_trip(300, seed=71) == 300
    first = round_trip.check(settings, publisher, second)
    assert first.ok and (first.rows, first.records, first.arrived) == (300, 300, 300), first.table()

    assert one_trip(200, seed=72) == 200  # the incremental mart appended 200 rows: only those sent
    again = round_trip.check(settings, publisher, second)
    assert again.ok and (again.rows, again.records, again.arrived) == (500, 500, 500), again.table()

    # The check sees a row changed on the way and a row that never arrived.
    first_row = f"(select min(event_id::text)::uuid from raw.{back})"
    last_row = f"(select max(event_id::text)::uuid from raw.{back})"
    with psycopg.connect(settings.warehouse_dsn, autocommit=True) as conn:
        conn.execute(f"update raw.{back} set amount_cents = amount_cents + 1 where event_id = {first_row}")
        conn.execute(f"delete from raw.{back} where event_id = {last_row}")
    broken = round_trip.check(settings, publisher, second)
    assert not broken.ok
    assert (broken.arrived, broken.arrived_repeated, broken.missing, broken.unexpected) == (499, 0, 2, 1)
