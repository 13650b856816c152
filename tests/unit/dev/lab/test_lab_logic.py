"""The lab's pure parts: counting loss and duplication, choosing the trials, writing the report."""

from __future__ import annotations

import csv
from decimal import Decimal

from eosflow_dev.lab import report, runner
from eosflow_dev.lab.outcome import Trial, tally
from eosflow_dev.produce.manifest import EventRow, Manifest


def _manifest(statuses: dict[str, str]) -> Manifest:
    return Manifest(
        "t", {}, [EventRow(eid, 0, i, status, 0) for i, (eid, status) in enumerate(statuses.items())]
    )


def test_tally_counts_against_the_manifest_not_the_table():
    m = _manifest({"a": "committed", "b": "committed", "c": "aborted", "d": "acknowledged", "e": "failed"})
    # b missing, a three times, c (aborted) leaked once, x is not ours
    t = tally(m, ["a", "a", "a", "c", "d", "x"])
    assert (t.produced, t.acknowledged, t.committed, t.lost) == (5, 3, 2, 1)
    assert t.duplicated == 2  # three copies of a count two; c once is not a duplicate


def test_tally_of_a_perfect_table():
    m = _manifest({"a": "committed", "b": "aborted"})
    assert tally(m, ["a"]) == tally(m, ["a"]) and tally(m, ["a"]).lost == tally(m, ["a"]).duplicated == 0


def test_the_small_lab_keeps_what_only_the_lab_shows_and_one_trial_of_each_runner():
    todo = {s.key: [m for m, _ in cells] for s, cells in runner.plan(None, None, 1, small=True)}
    eo = ("exactly_once", "kafka_exactly_once", "publish_exactly_once", "stream_exactly_once")
    # Every scenario runs an exactly-once mode but the zombie, kept for the comparison that duplicates.
    assert all(any(m in modes for m in eo) for key, modes in todo.items() if key != "zombie")
    # The three semantics where they differ, with the Kafka and Iceberg sinks beside them.
    assert sorted(todo["kill-in-commit"]) == [
        "at_least_once",
        "at_most_once",
        "changes_at_least_once",
        "changes_at_most_once",
        "exactly_once",
        "iceberg_exactly_once",
    ]
    assert todo["zombie"] == ["at_least_once"]
    assert todo["postgres-restart"] == ["exactly_once"]
    assert {"producer-retries", "leader-failure"} <= set(todo)
    # The Kafka sink's own boundary, in both its modes: where the at-least-once comparison duplicates.
    assert todo["kill-in-kafka-transaction"] == ["kafka_exactly_once", "kafka_at_least_once"]
    assert todo["publish-kill-in-transaction"] == ["publish_exactly_once", "publish_at_least_once"]
    assert todo["stream-replay-race"] == ["stream_exactly_once"]
    # The rest is the full lab's: other boundaries, restarts, the Airflow clear (a standalone of its own).
    skipped = {
        "kill-after-plan",
        "kill-after-commit",
        "airflow-clear",
        "broker-restart",
        "stream-kill-in-commit",
    }

    assert not skipped & set(todo)
    assert sum(map(len, todo.values())) == 15


def test_a_scenario_named_with_small_runs_its_first_mode_even_when_the_small_lab_skips_it():
    named = runner.plan(["airflow-clear", "zombie"], None, 1, small=True)
    assert [(s.key, cells) for s, cells in named] == [
        ("airflow-clear", [("exactly_once", 1)]),
        ("zombie", [("at_least_once", 1)]),
    ]


def test_the_full_lab_runs_every_consumer_scenario_under_every_mode_and_trials_repeat():
    todo = {s.key: cells for s, cells in runner.plan(None, None, 2, small=False)}
    assert len(todo["kill-after-plan"]) == 6 * 2  # three warehouse modes, two Kafka-sink modes, Iceberg
    assert {m for m, _ in todo["kill-after-stage"]} == {
        "exactly_once",
        "at_least_once",
        "at_most_once",
        "iceberg_exactly_once",
        *runner.CHANGES,
    }
    assert {m for m, _ in todo["zombie"]} >= set(runner.CHANGES)
    assert {m for m, _ in todo["postgres-restart"]} >= set(runner.CHANGES)
    assert todo["producer-retries"] == [("exactly_once", 1), ("exactly_once", 2)]
    stream = [k for k in todo if k.startswith("stream-")]
    assert sorted(stream) == [
        "stream-broker-restart",
        "stream-kill-after-commit",
        "stream-kill-after-plan",
        "stream-kill-after-stage",
        "stream-kill-in-commit",
        "stream-postgres-restart",
        "stream-replay-race",
    ]
    only = runner.plan(["zombie"], ["at_most_once"], 1, small=False)
    assert [(s.key, cells) for s, cells in only] == [("zombie", [("at_most_once", 1)])]


def _trial(scenario: str, mode: str, lost: int, dup: int, verdict: str, trial: int = 1) -> Trial:
    return Trial(scenario, mode, "transactional", trial, 10, 8, 8 - lost, lost, dup, verdict, 1, "detail")


def test_the_report_sums_trials_and_marks_loss_and_duplicates(tmp_path):
    trials = [
        _trial("kill", "exactly_once", 0, 0, "pass"),
        _trial("kill", "exactly_once", 0, 0, "pass", trial=2),
        _trial("kill", "at_most_once", 8, 0, "fail: I4"),
    ]
    table = report.markdown_table(trials)
    assert "| kill | transactional | exactly_once | 2 | 20 | 16 | 16 | 0 | 0 | n/a | pass | 2 |" in table
    assert "| **8** | 0 | n/a | fail: I4 |" in table
    md, table_csv = report.write(trials, tmp_path, "# header")
    assert "What happened, trial by trial" in md.read_text()
    with table_csv.open() as fh:
        assert len(list(csv.DictReader(fh))) == 3


def test_the_readme_block_is_replaced_only_between_its_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{report.README_START}\nold\n{report.README_END}\nafter\n")
    assert report.update_readme(readme, [_trial("kill", "exactly_once", 0, 0, "pass")], "ran it")
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    assert "ran it" in text and "| kill |" in text
    (tmp_path / "other.md").write_text("no markers")
    assert not report.update_readme(tmp_path / "other.md", [], "x")


def test_the_toxiproxy_client_reads_both_versions_answers_to_get_version(tmp_path):
    """v2.5.0 (what Debian's Go 1.19 builds) answers GET /version in plain text, newer ones in JSON."""
    import http.server
    import threading

    from eosflow_dev.lab.proxy import Toxiproxy

    answers = {"/version": ("text/plain", b"2.5.0"), "/proxies": ("application/json", b'{"kafka": {}}')}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            kind, body = answers[self.path]
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = Toxiproxy(tmp_path / "toxiproxy-server", tmp_path)
        client.api_port = server.server_address[1]
        assert client._request("GET", "/version") == "2.5.0"
        assert client._request("GET", "/proxies") == {"kafka": {}}
        answers["/version"] = ("application/json", b'{"version": "2.12.0"}')
        assert client._request("GET", "/version") == {"version": "2.12.0"}
    finally:
        server.shutdown()


def _changes(*steps: tuple[str, int, str]) -> dict[str, tuple[str, tuple]]:
    """Changes by LSN id: (op, key, email), in LSN order from 10."""
    return {
        str(10 * (i + 1)): (op, (key, email, "1.50", 1_000_000, '{"tier": "gold"}'))
        for i, (op, key, email) in enumerate(steps)
    }


def test_the_source_table_is_each_keys_last_committed_change_aborted_ones_left_out():
    from eosflow_dev.lab.changes import ChangeManifest

    sent = _changes(("c", 1, "a"), ("c", 2, "b"), ("u", 1, "a2"), ("d", 2, ""), ("c", 3, "c"), ("u", 3, "c2"))
    statuses = ["committed", "committed", "aborted", "committed", "committed", "aborted"]
    rows = [EventRow(eid, 0, i, st, i) for i, (eid, st) in enumerate(zip(sent, statuses, strict=True))]
    rows.insert(4, EventRow("40~", 0, 9, "committed", 3))  # the delete's tombstone
    m = ChangeManifest("t", {}, rows, {}, sent)
    gold = {"tier": "gold"}
    assert m.source_table() == {
        1: ("a", Decimal("1.50"), 1_000_000, gold),
        3: ("c", Decimal("1.50"), 1_000_000, gold),
    }
    counted = m.committed_changes()
    assert [r.event_id for r in counted.rows] == list(sent)  # the tombstone is no change
    # the changelog holds the committed changes, one of them twice: re-delivered, not lost
    t = tally(counted, ["10", "20", "40", "50", "50"])
    assert (t.acknowledged, t.committed, t.lost, t.duplicated) == (4, 4, 0, 1)


def test_the_replica_counts_keys_missing_stale_and_extra_against_the_source():
    from eosflow_dev.lab.changes import compare

    source = {1: ("a", None, 1, {}), 2: ("b", None, 2, {}), 3: ("c", None, 3, {})}
    replica = {1: ("a", None, 1, {}), 2: ("b", None, 2, {"x": 1}), 4: ("d", None, 4, {})}
    found = compare(source, replica)
    assert (found.missing, found.stale, found.extra, found.differs) == (1, 1, 1, 3)
    assert compare(source, dict(source)).differs == 0


def test_the_lab_changes_are_debeziums_envelopes_each_delete_followed_by_its_tombstone():
    import json

    from eosflow_dev.lab.changes import events, keys_for

    sent: dict = {}
    produced = list(events(60, seed=3, sent=sent))
    changes = [e for e in produced if e.value is not None]
    assert len(changes) == 60 == len(sent) and keys_for(60) >= 1
    lsns = [json.loads(e.value)["source"]["lsn"] for e in changes]
    assert lsns == sorted(set(lsns)) and [str(n) for n in lsns] == [e.event_id for e in changes]
    for i, e in enumerate(produced):
        body = json.loads(e.value) if e.value is not None else None
        assert e.key == b'{"id":%d}' % sent[e.event_id.rstrip("~")][1][0]
        if body is not None and body["op"] == "d":
            assert produced[i + 1].value is None and produced[i + 1].event_id == f"{e.event_id}~"


def test_a_trial_with_a_replica_shows_its_counts_and_one_without_says_n_a():
    from eosflow_dev.lab.changes import Replica

    tally_ = tally(_manifest({"a": "committed"}), ["a"])
    rest = {"invariants": "pass", "faults": 1, "fault_detail": "d"}
    kept = Trial.of("kill", "changes_at_most_once", "transactional", 1, tally_, Replica(2, 1, 3), **rest)
    plain = Trial.of("kill", "exactly_once", "transactional", 1, tally_, **rest)
    assert kept.replica == (2, 1, 3) and plain.replica is None
    assert report.replica([kept, kept]) == "4/2/6" and report.replica([plain]) == "n/a"
    assert "| **2/1/3** | pass |" in report.markdown_table([kept])


def test_a_cell_whose_fault_was_not_observed_runs_once_more_and_only_it():
    """A trial without its fault proves nothing: its cell is run again once, and the second run reported."""
    runs: list[list] = []
    faults = iter([0, 1, 1])  # the first run of (exactly_once, 1) saw no fault

    def run(lab, cells):
        runs.append(list(cells))
        return [Trial("s", m, "p", t, 10, 10, 10, 0, 0, "pass", next(faults), "d") for m, t in cells]

    class Lab:
        def log(self, msg: str) -> None:
            pass

    scenario = runner.Scenario("s", run)
    trials, errors = runner.run(Lab(), [(scenario, [("exactly_once", 1), ("at_least_once", 1)])])
    assert errors == [] and runs == [[("exactly_once", 1), ("at_least_once", 1)], [("exactly_once", 1)]]
    assert sorted((t.mode, t.faults) for t in trials) == [("at_least_once", 1), ("exactly_once", 1)]
