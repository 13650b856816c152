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
        ({"mode": "catch-up", "partitions": (0,), "size": 0}, "chunk_size must be a whole number"),
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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("offsets", [1_000_000, 100_000_000])
def test_a_chunk_count_past_the_limit_is_refused_in_arithmetic_before_any_chunk_exists(offsets):
    # chunk_size 1 over 100M offsets: 100M OffsetRanges would take gigabytes (1M: some 200 MiB). The
    # refusal must come from counting, so the peak allocation stays that of a few objects, dry run or not.
    import tracemalloc

    kafka = {0: PartitionOffsets(0, offsets)}
    req = BackfillRequest("orders", "catch-up", (0,), None, None, chunk_size=1)
    tracemalloc.start()
    try:
        with pytest.raises(BackfillError, match=rf"{offsets:,} chunks of 1 offsets.*at most 1024"):
            validate(req, "t", kafka, {0: 0}, {}, max_chunks=1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2**20, f"peak {peak / 2**20:.1f} MiB: chunks were built before the count"


@pytest.mark.parametrize("size", [0, -5, 2.5, True, "10"])
def test_a_chunk_size_that_is_not_a_whole_number_of_at_least_one_is_refused_by_name(size):
    req = BackfillRequest("orders", "catch-up", (0,), None, None, chunk_size=size)
    with pytest.raises(BackfillError, match=r"chunk_size must be a whole number of offsets >= 1"):
        validate(req, "t", KAFKA, POSITIONS, COMMITTED)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, 100_000), ("", 100_000), (250, 250), ("250", 250), (0, 0), (-3, -3)],
)
def test_a_forms_chunk_size_is_the_default_only_when_missing(value, expected):
    # 0 from the DAG form used to become 100,000 silently (`x or 100_000`); it must reach validate.
    assert BackfillRequest.parse_chunk_size(value) == expected


@pytest.mark.parametrize("value", [1.5, 2.0, True, "ten", [3]])
def test_a_forms_chunk_size_that_is_no_whole_number_is_refused_by_name(value):
    with pytest.raises(BackfillError, match=r"chunk_size must be a whole number"):
        BackfillRequest.parse_chunk_size(value)


def test_a_forms_zero_chunk_size_is_refused_not_replaced_by_the_default():
    req = BackfillRequest(
        "orders", "catch-up", (0,), None, None, chunk_size=BackfillRequest.parse_chunk_size(0)
    )
    with pytest.raises(BackfillError, match=r"chunk_size must be a whole number of offsets >= 1; got 0"):
        validate(req, "t", KAFKA, POSITIONS, COMMITTED)
