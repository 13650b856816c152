"""Partitioned targets without Postgres: the merge planner of compaction, names and bounds."""

from __future__ import annotations

from eosflow.sinks.postgres.compact import plan_merges
from eosflow.sinks.postgres.partitions import Child, _child, committed_name, staged_child


def child(start: int, end: int, partition: int = 0, topic: str = "t") -> Child:
    return Child(f"raw.c_{topic}_{partition}_{start}", topic, partition, start, end)


def spans(merges) -> list[tuple[int, int, int]]:
    return [(m.partition, m.start, m.end) for m in merges]


def test_adjacent_small_children_of_a_partition_merge_into_one():
    children = [child(0, 10), child(10, 20), child(20, 30)]
    rows = {c.table: 10 for c in children}
    assert spans(plan_merges(children, rows, target_rows=100)) == [(0, 0, 30)]


def test_a_merge_never_grows_past_the_target_size_and_a_full_child_is_left_alone():
    children = [child(0, 10), child(10, 20), child(20, 30), child(30, 40), child(40, 50)]
    rows = {children[0].table: 40, children[1].table: 40, children[2].table: 40, children[3].table: 100}
    rows[children[4].table] = 5
    # 40+40 fit in 100, +40 would not; the 100-row child is full; the last one has nobody to merge with.
    assert spans(plan_merges(children, rows, target_rows=100)) == [(0, 0, 20)]


def test_a_streams_merge_takes_only_the_children_commits_made():
    """A stream merges every minute: a child an earlier merge made is left for the hourly compaction, so
    the stream copies each row once, whatever the rate."""
    children = [child(0, 10), child(10, 20), child(20, 30), child(30, 40), child(40, 50)]
    children[1] = Child(children[1].table, "t", 0, 10, 20, 60, merged=True)
    rows = {c.table: 5 for c in children}
    assert spans(plan_merges(children, rows, target_rows=5_000_000, commits_only=True)) == [(0, 20, 50)]
    assert spans(plan_merges(children, rows, target_rows=5_000_000)) == [(0, 0, 50)]


def test_a_merge_takes_at_most_500_children_so_its_locks_fit_postgres_defaults():
    """A merge holds a lock on each child it copies and drops, till it commits: with Postgres' defaults
    (max_locks_per_transaction 64, max_connections 100) one of 2,000 children failed with "out of shared
    memory" (1,000 did not), and the next compaction planned the same merge. A stream told not to merge
    leaves 3,600 children an hour per Kafka partition."""
    children = [child(i, i + 1) for i in range(1_200)]
    merges = plan_merges(children, {c.table: 1 for c in children}, target_rows=5_000_000)
    assert [len(m.children) for m in merges] == [500, 500, 200]
    assert spans(merges) == [(0, 0, 500), (0, 500, 1_000), (0, 1_000, 1_200)]


def test_a_merged_childs_note_says_so_and_reads_back():
    parsed = _child("raw.x", "FOR VALUES FROM ('t', 0, 5) TO ('t', 0, 9)", "eosflow: 42 rows, merged")
    assert (parsed.rows, parsed.merged) == (42, True)
    assert _child("raw.x", "FOR VALUES FROM ('t', 0, 5) TO ('t', 0, 9)", "eosflow: 42 rows").merged is False


def test_a_gap_between_children_ends_a_run():
    children = [child(0, 10), child(10, 20), child(25, 30), child(30, 40)]
    rows = {c.table: 1 for c in children}
    assert spans(plan_merges(children, rows, target_rows=100)) == [(0, 0, 20), (0, 25, 40)]


def test_children_of_different_partitions_or_topics_never_merge():
    children = [child(0, 10, 0), child(10, 20, 1), child(0, 10, 0, "u"), child(10, 20, 1, "u")]
    assert plan_merges(children, {c.table: 1 for c in children}, target_rows=100) == []


def test_a_single_child_is_no_merge_and_order_of_input_does_not_matter():
    children = [child(20, 30), child(0, 10), child(10, 20)]
    assert spans(plan_merges(children, {}, target_rows=100)) == [(0, 0, 30)]
    assert plan_merges([child(0, 10)], {}, target_rows=100) == []


def test_a_partition_bound_as_postgres_prints_it_reads_back():
    parsed = _child(
        "raw.x", "FOR VALUES FROM ('orders.eu', 3, '500') TO ('orders.eu', 3, '1000')", "eosflow: 42 rows"
    )
    assert parsed == Child("raw.x", "orders.eu", 3, 500, 1000, 42)
    assert _child("raw.x", "FOR VALUES FROM ('t', 0, 5) TO ('t', 0, 9)", None).rows is None


def test_targets_sharing_their_first_characters_name_their_children_apart():
    first, second = "raw.orders_enriched_by_customer", "raw.orders_enriched_by_customer_v2"
    assert committed_name(first, "orders", 0, 0) != committed_name(second, "orders", 0, 0)
    assert committed_name("raw." + "x" * 63, "t", 0, 0) != committed_name("raw." + "x" * 62 + "y", "t", 0, 0)


def test_names_fit_postgres_identifiers_and_differ_per_range():
    long = "raw." + "x" * 60
    name = committed_name(long, "topic", 99999, 2**63 - 1)
    assert len(name.split(".")[1]) <= 63
    assert committed_name(long, "topic", 7, 1) != committed_name(long, "topic", 7, 2)
    assert staged_child("b", "t", 0) != staged_child("b", "t", 1)
    assert len(staged_child("b" * 200, "t" * 200, 0).split(".")[1]) <= 63
