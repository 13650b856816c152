from eosflow.ledger.positions import PartitionCounts
from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
from eosflow.runners.summary import RunSummary


def test_summary_shows_each_partition_totals_losses_and_rate():
    plan = Plan(
        "p:r",
        "p",
        "r",
        (
            PartitionPlan(OffsetRange("t", 0, 0, 1_200_000), first_seen=True, lag_after=5),
            PartitionPlan(OffsetRange("t", 1, 100, 100), first_seen=False, lost=OffsetRange("t", 1, 50, 100)),
        ),
    )
    counts = {("t", 0): PartitionCounts(1_000_000, 999_990, 10), ("t", 1): PartitionCounts(0)}
    text = RunSummary("p", "p:r", "committed", plan, counts, {"read": 2.0, "commit": 0.5}).table()
    lines = text.splitlines()
    assert "outcome: COMMITTED" in lines[0]
    row0 = lines[2].split()
    assert (
        row0[:7] == ["t[0]", "0", "1,200,000", "1,000,000", "999,990", "10", "5"]
        and "(first range)" in lines[2]
    )
    assert "lost [50, 100)" in lines[3]
    assert lines[4].split() == ["total", "1,000,000", "999,990", "10"]
    assert "total 2.5s; 400,000 records/s" in lines[5]


def test_summary_of_a_failed_run_before_planning_is_one_line():
    assert RunSummary("p", "p:r").table() == "pipeline p  batch p:r  outcome: FAILED"
