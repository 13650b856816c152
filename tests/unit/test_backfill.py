import pytest

from eosflow.ledger.backfill import BackfillError, BackfillRequest, chunk, validate
from eosflow.ledger.planner import PartitionOffsets
from eosflow.ledger.ranges import OffsetRange

KAFKA = {0: PartitionOffsets(0, 1000), 1: PartitionOffsets(100, 800)}
POSITIONS = {0: 600, 1: 300}
COMMITTED = {0: (0, 600), 1: (100, 300)}


def _run(mode, partitions=None, frm=None, to=None, size=1000):
    req = BackfillRequest("orders", mode, partitions, frm, to, size)
    return validate(req, "t", KAFKA, POSITIONS, COMMITTED)


def test_catch_up_runs_from_the_stored_position_to_the_end_in_ordered_chunks():
    assert _run("catch-up", (0,), size=150) == [
        OffsetRange("t", 0, 600, 750),
        OffsetRange("t", 0, 750, 900),
        OffsetRange("t", 0, 900, 1000),
    ]
    assert _run("catch-up", None, to=700) == [OffsetRange("t", 0, 600, 700), OffsetRange("t", 1, 300, 700)]


def test_replay_covers_committed_offsets_only():
    assert _run("replay", (0,), 100, 300) == [OffsetRange("t", 0, 100, 300)]
    assert _run("replay") == [OffsetRange("t", 0, 0, 600), OffsetRange("t", 1, 100, 300)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "sideways"}, "mode must be one of catch-up, replay"),
        ({"mode": "catch-up", "partitions": (0, 7)}, "has no partition 7"),
        ({"mode": "replay", "partitions": (0,), "frm": 300, "to": 200}, "ends before it starts"),
        ({"mode": "catch-up", "partitions": (0,), "to": 1200}, "beyond the last stable offset 1000"),
        ({"mode": "replay", "partitions": (1,), "frm": 50, "to": 200}, "never committed"),
        ({"mode": "catch-up", "partitions": (0,), "frm": 500}, "must start at the stored position 600"),
        ({"mode": "replay", "partitions": (0,), "frm": 500, "to": 700}, "[500, 700) was never committed"),
        ({"mode": "catch-up", "partitions": (0,), "size": 0}, "chunk size must be at least 1"),
    ],
)
def test_each_invalid_request_is_refused_with_its_reason(kwargs, message):
    with pytest.raises(BackfillError, match=message.replace("[", r"\[").replace(")", r"\)")):
        _run(**kwargs)


def test_a_range_below_the_log_start_is_refused():
    kafka = {0: PartitionOffsets(400, 1000)}
    req = BackfillRequest("orders", "replay", (0,), 100, 500)
    with pytest.raises(BackfillError, match="below the log start 400"):
        validate(req, "t", kafka, {0: 600}, {0: (0, 600)})


def test_a_replay_of_a_partition_never_committed_is_refused():
    with pytest.raises(BackfillError, match=r"t\[0\]: nothing was ever committed"):
        validate(BackfillRequest("orders", "replay", (0,)), "t", KAFKA, {}, {})


def test_all_problems_are_named_at_once():
    with pytest.raises(BackfillError) as err:
        _run("catch-up", None, frm=10)
    assert "t[0]" in str(err.value) and "t[1]" in str(err.value) and "nothing was run" in str(err.value)


def test_partitions_text_and_chunking():
    assert BackfillRequest.parse_partitions("all") is None
    assert BackfillRequest.parse_partitions(" 2, 0,2") == (0, 2)
    with pytest.raises(BackfillError, match="comma-separated"):
        BackfillRequest.parse_partitions("zero")
    assert chunk(OffsetRange("t", 0, 0, 5), 2) == [
        OffsetRange("t", 0, 0, 2),
        OffsetRange("t", 0, 2, 4),
        OffsetRange("t", 0, 4, 5),
    ]


def test_more_chunks_than_the_orchestrator_can_map_is_refused_with_a_chunk_size_that_fits():
    req = BackfillRequest("orders", "catch-up", (0,), None, None, chunk_size=10)  # 40 chunks of [600, 1000)
    with pytest.raises(BackfillError, match=r"40 chunks.*at most 16.*chunk_size of at least 25"):
        validate(req, "t", KAFKA, POSITIONS, COMMITTED, max_chunks=16)
    assert len(validate(req, "t", KAFKA, POSITIONS, COMMITTED, max_chunks=40)) == 40
