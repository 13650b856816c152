from eosflow_dev.produce.manifest import EventRow, Manifest
from eosflow_dev.produce.readback import ReadRecord
from eosflow_dev.produce.reconcile import reconcile


def _manifest() -> Manifest:
    return Manifest(
        "t",
        {"acks": "all"},
        [
            EventRow("a", 0, 0, "committed", 0),
            EventRow("b", 1, 0, "committed", 0),
            EventRow("c", 0, 2, "aborted", 1),
            EventRow("d", 1, 5, "fenced", 2),
            EventRow("e", 1, 7, "acknowledged", -1),
            EventRow("f", -1, -1, "failed", -1),
        ],
    )


def test_manifest_round_trips_through_its_files(tmp_path):
    m = _manifest()
    m.summary_extra["elapsed_s"] = 1.5
    path = m.write(tmp_path / "run.json")
    back = Manifest.read(path)
    assert back.rows == m.rows
    assert back.summary_extra == {"elapsed_s": 1.5}
    assert back.counts() == {
        "committed": 2,
        "aborted": 1,
        "fenced": 1,
        "acknowledged": 1,
        "sent": 0,
        "failed": 1,
    }
    assert back.per_partition() == {0: 1, 1: 2}


def test_exact_read_reconciles():
    got = reconcile(
        _manifest(),
        [
            ReadRecord(0, 0, "a"),
            ReadRecord(1, 0, "b"),
            ReadRecord(1, 7, "e"),
            ReadRecord(0, 9, "someone-elses"),
        ],
    )
    assert got.ok and got.expected == 3 and got.found == 3


def test_each_kind_of_mismatch_is_reported():
    got = reconcile(
        _manifest(),
        [
            ReadRecord(0, 0, "a"),
            ReadRecord(0, 1, "a"),  # duplicated
            ReadRecord(0, 2, "c"),  # aborted, leaked
            ReadRecord(1, 6, "e"),  # misplaced
            # "b" missing
        ],
    )
    assert not got.ok
    assert got.missing == ["b"]
    assert got.duplicated == ["a"]
    assert got.leaked == ["c"]
    assert "e" in got.misplaced
    assert "1 missing" in got.describe()
