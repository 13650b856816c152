"""The change-stream bench (issue 44) at a tiny size against the running stack, and its generator, untimed.

The smoke test checks what the bench claims: eosflow's state table and the merge loop's replica hold exactly
the rows the generator says the source holds, and each eosflow run took every record of the topic. The
fast tests hold the generator to Debezium's shape and to its own account of the source.
"""

from __future__ import annotations

import argparse
import json

import msgspec
import psycopg
import pytest

from eosflow_dev.bench import change_load, cli, merge_loop
from eosflow_dev.bench.results import CHANGE_MEASUREMENTS, read_csv

CHANGES, KEYS, PARTITIONS = 3_000, 300, 2


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_smoke_the_change_cells_replicate_the_source_exactly(running_stack, tmp_path):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(
        ["--smoke", "--changes", str(CHANGES), "--keys", str(KEYS), "--partitions", str(PARTITIONS)]
        + ["--out", str(tmp_path)]
    )

    assert cli.execute(args, running_stack) == 0

    assert (tmp_path / "changes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = {r.measurement: r for r in read_csv(tmp_path / "changes.csv")}
    assert list(results) == list(CHANGE_MEASUREMENTS)
    counts = change_load.plan_counts(CHANGES, KEYS)
    records = CHANGES + counts["d"]  # a tombstone after every delete
    for name, r in results.items():
        assert (r.partitions, r.records) == (PARTITIONS, records), name
        assert r.seconds > 0 and r.peak_rss_mib > 0, name
    # Both state tables equal the generator's source (the same digest), which holds one row per live key.
    state, merged = results["eosflow-changes"], results["merge-loop"]
    assert state.fingerprint == merged.fingerprint != ""
    assert state.rows_checked == merged.rows_checked == KEYS  # as many re-inserts as deletes at the end
    assert state.detail["rejected"] == 0 and state.detail["written"] == records
    assert results["eosflow-append"].detail["rejected"] == counts["d"]  # the tombstones: null values
    # The state apply's seconds came from the commit's log, inside the commit's.
    assert 0 < state.detail["of which the state apply"] <= state.detail["commit"]
    text = (tmp_path / "changes.md").read_text()
    assert "eosflow changes ≥ 1.0 × the merge loop" in text and "PROBLEM" not in text
    assert not (tmp_path / "work").exists(), "a successful smoke run leaves only its results"
    with psycopg.connect(running_stack.warehouse_dsn) as conn:
        left = conn.execute(
            "select tablename from pg_tables where schemaname = 'bench' and tablename like %s",
            (f"%{state.run_id}%",),
        ).fetchall()
    assert left == [], "the bench drops every table it made"


def test_the_generator_keeps_the_counts_lsn_order_and_the_sources_end():
    final: dict[int, change_load.Row] = {}
    changes = list(change_load.generate(CHANGES, KEYS, 11, final))
    counts = change_load.plan_counts(CHANGES, KEYS)
    ops = [op for op, _, _ in changes]
    assert ops[:KEYS] == ["c"] * KEYS and [r[0] for _, r, _ in changes[:KEYS]] == list(range(1, KEYS + 1))
    assert (ops.count("u"), ops.count("d"), ops.count("c")) == (counts["u"], counts["d"], KEYS + counts["re"])
    lsns = [lsn for _, _, lsn in changes]
    assert all(a < b for a, b in zip(lsns, lsns[1:], strict=False))
    # Replaying the changes in order gives the generator's final rows: nothing updated or deleted a dead key.
    replay: dict[int, tuple] = {}
    for op, row, _ in changes:
        if op == "d":
            assert row[0] in replay
            del replay[row[0]]
        else:
            assert (op == "c") == (row[0] not in replay)
            replay[row[0]] = row
    assert replay == final
    assert change_load.generate(CHANGES, KEYS, 11, {}).__next__() == changes[0]  # seeded


def test_an_envelope_is_debeziums_and_both_readers_take_it():
    """The value is Debezium's JSON without the schema block; eosflow's change check and the merge loop's
    structs read the same row from it."""
    from eosflow.schema.changes import ChangeCheck
    from eosflow.schema.declaration import parse_schema
    from eosflow_dev.bench.change_suite import COLUMNS

    row = (7, "customer7.v2@example.com", "1234.50", 1_764_151_200_123_456, '{"tier":"gold"}')
    value = change_load.envelope("u", row, 5_000, 4_800, 9)
    doc = json.loads(value)
    assert list(doc) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    assert doc["source"]["lsn"] == 5_000 and doc["op"] == "u" and doc["before"] is None
    schema = parse_schema(
        {"format": "json", "columns": COLUMNS, "changes": "debezium", "primary_key": ["id"]}, "bench"
    )
    error, typed = ChangeCheck(schema, 65_536, None)(b'{"id":7}', value)
    assert error is None
    assert typed[0] == 7 and str(typed[2]) == "1234.50" and typed[4] == {"tier": "gold"}
    assert typed[3].isoformat() == "2025-11-26T10:00:00.123456+00:00" and typed[5:7] == ["u", 5_000]
    change = msgspec.json.Decoder(merge_loop.Change).decode(value)
    assert (change.after.id, str(change.after.balance), change.source.lsn) == (7, "1234.50", 5_000)
    deleted = msgspec.json.Decoder(merge_loop.Change).decode(
        change_load.envelope("d", (7, "", "", 0, ""), 6, 5, 9)
    )
    assert deleted.op == "d" and deleted.after is None and deleted.before.id == 7


def test_keys_the_mix_cannot_hold_are_refused_with_the_bound():
    with pytest.raises(ValueError, match="at most 200,000 keys"):
        change_load.plan_counts(1_000_000, 300_000)
    # Re-inserts bring back deleted keys: never more of them than deletes (4M changes need 400k keys).
    with pytest.raises(ValueError, match="at least 400,000 keys"):
        change_load.plan_counts(4_000_000, 100_000)
    assert change_load.plan_counts(4_000_000, 400_000) == {
        "c": 400_000,
        "u": 2_800_000,
        "d": 400_000,
        "re": 400_000,
    }


def test_the_merge_loop_imports_nothing_of_eosflows_own_path():
    """Written apart from eosflow's code: a faster eosflow schema, sink or ledger must not speed it up."""
    import subprocess
    import sys

    own = ("eosflow.schema", "eosflow.sinks", "eosflow.ledger")
    code = f"import sys, eosflow_dev.bench.merge_loop; print([m for m in sys.modules if m.startswith({own})])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_only_refuses_a_mix_of_the_two_workloads(settings, tmp_path):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--only", "eosflow,merge-loop", "--records", "10", "--out", str(tmp_path)])
    assert cli.execute(args, settings) == 2
