"""The warm server's memory report: the slope it judges a leak by, over the runs past the warm-up."""

from __future__ import annotations

from eosflow_dev.bench.connect_memory import Sample, report, slope_per_100


def _samples(rss) -> list[Sample]:
    return [Sample(n, 1.0, mib, mib * 0.8) for n, mib in enumerate(rss, 1)]


def test_the_warm_up_does_not_count_only_the_second_half_does():
    climbing_then_flat = [500 + 10 * n for n in range(50)] + [1000.0] * 50
    assert slope_per_100(_samples(climbing_then_flat)) == 0.0


def test_a_steady_climb_is_reported_per_hundred_runs():
    leaking = [1000 + 0.5 * n for n in range(200)]  # half a MiB a run
    assert round(slope_per_100(_samples(leaking)), 6) == 50.0


def test_the_report_shows_the_first_runs_every_twentieth_and_the_last():
    text = report(_samples([900.0 + n % 3 for n in range(45)]), records=10_000)
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == [1, 2, 3, 20, 40, 45]
    assert "MiB per 100 runs" in text and "45 runs of 10,000 records" in text
