"""The randomized schedule's model must see every kind of damage (else the soak's 0 proves nothing)."""

from tests.random.model import PipelineModel, Rec, Rows, compare


def _model() -> PipelineModel:
    m = PipelineModel("p", "t", "raw.p", 0)
    m.add(Rec(0, 0, "committed", "valid", "e1", 1))
    m.add(Rec(0, 1, "aborted", "valid", "e2", 1))
    m.add(Rec(0, 2, "committed", "not_json", None, 1))
    return m


def test_the_exact_warehouse_passes():
    assert compare(_model(), Rows({("t", 0, 0): ["e1"]}, {("t", 0, 2): ["not JSON"]}), complete=True) == []


def test_every_kind_of_damage_is_named():
    bad = compare(
        _model(),
        Rows(
            {("t", 0, 0): ["e1", "e1"], ("t", 0, 1): ["e2"], ("x", 0, 0): ["e9"]},
            {("t", 0, 0): ["oops"], ("t", 0, 9): ["?"]},
        ),
        complete=True,
    )
    text = "\n".join(bad)
    for expected in (
        "I1: raw.p row t[0]@0 appears 2 times",
        "t[0]@1: the record is aborted",
        "x[0]@0: not of the pipeline's topic t",
        "rejected row t[0]@0 (oops) is also in the output",
        "a valid record (step 1) was rejected",
        "t[0]@9 (?): no record was produced",
        "missing at a quiescent point, e.g. t[0]@2",
    ):
        assert expected in text, (expected, text)


def test_a_row_once_seen_may_never_vanish_and_losses_must_be_acknowledged():
    m = _model()
    m.seen = {("t", 0, 0)}
    m.delete_below(step=2, partition=0, below=3, present=set())
    bad = compare(m, Rows({}, {}), complete=True)
    assert any("seen earlier are gone" in b for b in bad)
    assert any("loss never acknowledged" in b for b in bad)
    m.acknowledged()
    m.seen = set()
    assert compare(m, Rows({}, {}), complete=True) == []
