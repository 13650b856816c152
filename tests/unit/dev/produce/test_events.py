import json

from eosflow_dev.produce import events


def test_same_seed_same_stream_other_seed_disjoint_ids():
    a = list(events.generate(1, 500))
    b = list(events.generate(1, 500))
    c = list(events.generate(2, 500))
    assert a == b
    assert len({e.event_id for e in a}) == 500
    assert not {e.event_id for e in a} & {e.event_id for e in c}


def test_every_event_follows_the_documented_schema():
    for event in events.generate(3, 200):
        body = json.loads(event.value)
        assert set(body) == {
            "event_id",
            "event_type",
            "event_time",
            "order_id",
            "customer_id",
            "amount_cents",
            "currency",
            "schema_version",
        }
        assert body["event_id"] == event.event_id
        assert body["event_type"] in events.EVENT_TYPES
        assert body["event_time"].endswith("Z")
        assert body["amount_cents"] > 0 and isinstance(body["amount_cents"], int)
        assert body["currency"] in events.CURRENCIES
        assert event.key == body["customer_id"].encode()
        assert 150 <= len(event.value) <= 260  # "around 200 bytes", as the benchmarks assume


def test_event_times_move_forward():
    times = [json.loads(e.value)["event_time"] for e in events.generate(4, 300)]
    assert times == sorted(times)
