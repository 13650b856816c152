"""The Iceberg sink's position property: what a commit and a replay change in it, and what they keep."""

from __future__ import annotations

import json

from eosflow.ledger.mirror import SinkCommitted, SinkReplayed
from eosflow.sinks.iceberg.catalog import committed_body, position_property, replayed_body


def test_a_commit_moves_the_position_and_keeps_the_replays_a_replay_counts_and_keeps_the_position():
    first = committed_body(None, SinkCommitted(100, "b1", 100, 98, 2), ["r1.parquet"])
    assert first == {
        "next": 100, "batch": "b1", "read": 100, "written": 98, "rejected": 2,
        "rejected_files": ["r1.parquet"],
    }  # fmt: skip
    replayed = replayed_body(first, SinkReplayed("rp1", 50, 49, 1), ["rp1.parquet"])
    assert replayed["next"] == 100 and replayed["batch"] == "b1" and replayed["replays"] == 1
    assert replayed["replay"] == {
        "batch": "rp1", "read": 50, "written": 49, "rejected": 1, "rejected_files": ["rp1.parquet"],
    }  # fmt: skip
    again = replayed_body(replayed, SinkReplayed("rp2", 10, 10, 0), [])
    assert again["replays"] == 2 and again["replay"]["batch"] == "rp2"
    later = committed_body(again, SinkCommitted(150, "b2", 50, 50, 0), [])
    assert (later["next"], later["batch"], later["replays"], later["replay"]["batch"]) == (
        150,
        "b2",
        2,
        "rp2",
    )
    ((key, value),) = position_property(("orders", 3), later).items()
    assert key == "eosflow.position.orders[3]" and json.loads(value) == later
