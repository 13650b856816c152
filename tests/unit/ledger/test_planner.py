import pytest

from eosflow.ledger.planner import (
    DataLossError,
    PartitionOffsets,
    PositionBeyondLogError,
    TopicRecreatedError,
    plan_partitions,
)
from eosflow.ledger.ranges import OffsetRange, Plan


def _plan(kafka, positions, max_records=1000, ack=False):
    return plan_partitions("p", "t", kafka, positions, max_records, ack)


def test_continues_from_stored_positions_and_caps_at_max_records():
    plans = _plan({0: PartitionOffsets(0, 5000), 1: PartitionOffsets(0, 300)}, {0: 1200, 1: 300}, 1000)
    assert [p.range for p in plans] == [OffsetRange("t", 0, 1200, 2200), OffsetRange("t", 1, 300, 300)]
    assert plans[0].lag_after == 2800 and plans[1].lag_after == 0
    assert not any(p.first_seen for p in plans)


def test_every_partition_is_planned_idle_and_new_ones_too():
    kafka = {0: PartitionOffsets(0, 10), 1: PartitionOffsets(0, 0), 2: PartitionOffsets(0, 7)}
    plans = _plan(kafka, {0: 10, 1: 0})  # partition 2 was added since the last run
    assert [p.range.partition for p in plans] == [0, 1, 2]
    assert plans[0].range.empty and plans[1].range.empty
    assert plans[2].first_seen and plans[2].range == OffsetRange("t", 2, 0, 7)


def test_never_seen_partition_follows_the_initial_policy():
    kafka = {
        0: PartitionOffsets(50, 100, initial=80),
        1: PartitionOffsets(50, 100),
        2: PartitionOffsets(50, 100, initial=500),
    }
    plans = _plan(kafka, {})
    assert [p.range.start for p in plans] == [80, 50, 100]  # explicit, earliest, past the end: clamped
    assert all(p.first_seen for p in plans)


def test_an_initial_offset_below_the_log_start_is_data_loss_not_rounded_up():
    with pytest.raises(DataLossError) as err:
        _plan({0: PartitionOffsets(50, 100, initial=0)}, {})
    assert err.value.missing == [OffsetRange("t", 0, 0, 50)]
    plans = _plan({0: PartitionOffsets(50, 100, initial=0)}, {}, ack=True)
    assert plans[0].first_seen and plans[0].lost == OffsetRange("t", 0, 0, 50)
    assert plans[0].range == OffsetRange("t", 0, 50, 100)


def test_deleted_records_before_the_position_fail_with_the_missing_range():
    kafka = {0: PartitionOffsets(400, 900), 1: PartitionOffsets(0, 10)}
    with pytest.raises(DataLossError) as err:
        _plan(kafka, {0: 150, 1: 0})
    assert err.value.missing == [OffsetRange("t", 0, 150, 400)]
    assert "t[0] [150, 400)" in str(err.value) and "--acknowledge-data-loss" in str(err.value)


def test_acknowledged_loss_is_planned_as_a_lost_range_and_reading_resumes_at_log_start():
    plans = _plan({0: PartitionOffsets(400, 900)}, {0: 150}, ack=True)
    assert plans[0].lost == OffsetRange("t", 0, 150, 400)
    assert plans[0].range == OffsetRange("t", 0, 400, 900)


def test_a_position_past_the_log_end_is_refused():
    with pytest.raises(PositionBeyondLogError, match="recreated"):
        _plan({0: PartitionOffsets(0, 10)}, {0: 50})


def test_ranges_reject_nonsense_and_a_plan_reads_only_its_nonempty_ranges():
    with pytest.raises(ValueError):
        OffsetRange("t", 0, 10, 5)
    plan = Plan("p:r", "p", "r", tuple(_plan({0: PartitionOffsets(0, 10), 1: PartitionOffsets(0, 0)}, {})))
    assert plan.nonempty == [OffsetRange("t", 0, 0, 10)]


def test_a_topic_re_created_under_the_same_name_is_refused_naming_both_ids():
    kafka = {0: PartitionOffsets(0, 500), 1: PartitionOffsets(0, 500)}
    with pytest.raises(TopicRecreatedError) as err:
        plan_partitions("p", "t", kafka, {0: 100, 1: 100}, 1000, topic_id="NEW", stored_topic_ids={0: "OLD"})
    assert "'t'" in str(err.value) and "OLD" in str(err.value) and "NEW" in str(err.value)
    # Positions stored before ids were kept (None) are adopted by the next commit, not refused.
    plans = plan_partitions("p", "t", kafka, {0: 100}, 1000, topic_id="NEW", stored_topic_ids={0: None})
    assert [p.topic_id for p in plans] == ["NEW", "NEW"]
