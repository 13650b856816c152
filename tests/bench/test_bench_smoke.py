"""The bench in CI: the whole harness at a tiny size against the running stack, and its report, untimed.

The smoke test checks what the bench claims, not how fast anything is: every measurement moved
exactly the records loaded, and every table written holds the same rows. The fast tests below pin
the parsers to the real output formats and render the report from made-up results.
"""

from __future__ import annotations

import argparse

import pytest

from eosflow_dev.bench import ceilings, cli, eosflow_run, report
from eosflow_dev.bench.machine import Machine
from eosflow_dev.bench.results import MEASUREMENTS, OVERHEADS, WRITERS, Result, read_csv, write_csv

RECORDS = 5_000
PARTITIONS = 2
# These start a JVM of their own; eosflow's own runs of the smoke's size read without Spark.
SPARK_RUNS = ("overhead-spark", "read-check", "streaming")


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_smoke_every_measurement_moves_exactly_the_loaded_records(running_stack, tmp_path):
    """Slow because it runs every bench measurement once at 5,000 records, each in a process of its own:
    four of them start a JVM (Kafka's ConsumerPerformance, Spark for the 1-record run, the read-and-check
    floor and Structured Streaming), and two go through the stack's Spark Connect server."""
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(
        ["--smoke", "--records", str(RECORDS), "--partitions", str(PARTITIONS), "--out", str(tmp_path)]
    )

    assert cli.execute(args, running_stack) == 0

    for name in ("latest.md", "latest.csv", "latest.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert (tmp_path / "latest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = {r.measurement: r for r in read_csv(tmp_path / "latest.csv")}
    assert list(results) == list(MEASUREMENTS)
    for name, r in results.items():
        assert (r.partitions, r.loaded) == (PARTITIONS, RECORDS), name
        assert r.records == (1 if name in OVERHEADS else RECORDS), name
        assert r.seconds > 0 and r.wall_s > 0 and r.records_per_s > 0, name
        assert r.peak_rss_mib > 0, name
    for name in (*SPARK_RUNS, "read-ceiling"):
        assert results[name].peak_jvm_rss_mib > 0, f"{name}: its JVM was not sampled"

    # Each table was counted after its run, and all hold the same rows (the digest covers the
    # coordinates and every field of the event).
    for name in WRITERS:
        assert results[name].rows_checked == RECORDS, name
    assert results["overhead"].rows_checked == results["overhead-spark"].rows_checked == 1
    assert results["overhead-warm"].rows_checked == 1
    # The warm runs went through the stack's Spark Connect server (a session, not a JVM of their own).
    assert (
        "spark start" in results["overhead-warm"].detail and "spark start" in results["eosflow-warm"].detail
    )
    assert (
        "spark start" not in results["overhead"].detail and "spark start" in results["overhead-spark"].detail
    )
    assert results["handwritten"].fingerprint == results["streaming"].fingerprint
    assert len({results[name].fingerprint for name in WRITERS}) == 1

    # eosflow's step timings came through, and they fit inside its process's lifetime.
    steps = {k: v for k, v in results["eosflow"].detail.items() if k not in ("rejected", "outside phases")}
    assert steps and sum(steps.values()) <= results["eosflow"].wall_s + 0.5
    text = (tmp_path / "latest.md").read_text()
    assert "## Targets" in text and "## Where eosflow's time goes" in text and "PROBLEM" not in text
    assert not (tmp_path / "work").exists(), "a successful smoke run leaves only its results"


def test_ingest_summary_parser_reads_the_jobs_own_table():
    from eosflow.ledger.positions import PartitionCounts
    from eosflow.ledger.ranges import OffsetRange, PartitionPlan, Plan
    from eosflow.runners.summary import RunSummary

    plan = Plan("p:r", "p", "r", (PartitionPlan(OffsetRange("t", 0, 0, 1_200), first_seen=True),))
    phases = {"plan": 0.01, "spark start": 7.8, "read": 15.0, "transform+stage": 39.5, "commit": 6.5}
    table = RunSummary(
        "p", "p:r", "committed", plan, {("t", 0): PartitionCounts(1_000, 990, 10)}, phases
    ).table()

    parsed = eosflow_run.parse_summary("some log line\n" + table + "\n")

    assert (parsed.outcome, parsed.read, parsed.written, parsed.rejected) == ("COMMITTED", 1_000, 990, 10)
    assert parsed.phases == phases


def test_consumer_performance_parser_reads_kafka_4_2s_csv_line():
    out = (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "2026-11-22 13:53:56:322, 2026-11-22 13:53:59:396, 1.1528, 0.3750, 5000, 1626.5452, 2307, 767, "
        "1.5030, 6518.9048\n"
    )
    stats = ceilings.parse_consumer_performance(out)
    assert stats["records"] == 5000 and stats["fetch_s"] == pytest.approx(0.767)
    with pytest.raises(ceilings.CeilingOutputError):
        ceilings.parse_consumer_performance("WARN nothing consumed\n")


def _fake(measurement: str, partitions: int, loaded: int, seconds: float, rss: float = 700.0) -> Result:
    records = 1 if measurement in OVERHEADS else loaded
    detail = {"spark start": 8.0, "read": seconds / 3, "commit": 1.0} if measurement == "eosflow" else {}
    return Result(
        "r1", measurement, partitions, loaded, records, records * 240, seconds, seconds + 1, rss, rss / 2,
        "its process", rows_checked=records, fingerprint="42", detail=detail,
    )  # fmt: skip


def test_report_renders_latest_and_scaling_from_results(tmp_path):
    info = report.RunInfo(
        "r1", "2026-11-22 14:00 UTC", Machine("CPU", 2, 23.5, "6.1", "3.11", "17", "4.2.0", "15", "4.3.0"),
        (0.5, 0.4, 0.3), (1.5, 0.9, 0.4),
    )  # fmt: skip
    seconds = {"read-ceiling": 2, "write-ceiling": 5, "write-ceiling-2": 4, "eosflow": 40, "iceberg": 30,
               "read-check": 25, "overhead": 20, "overhead-spark": 30, "eosflow-warm": 24,
               "overhead-warm": 1.2, "handwritten": 90, "competent": 36, "streaming": 45}  # fmt: skip
    latest = [_fake(m, 6, 1_000_000, s) for m, s in seconds.items()]
    paths = report.write_latest(tmp_path, latest, info)
    assert [p.name for p in paths] == ["latest.md", "latest.csv", "latest.png"]
    text = (tmp_path / "latest.md").read_text()
    assert "| ≥ 3 × the executemany loop | 2.25 × | MISSED |" in text
    assert "| ≥ 1.1 × Structured Streaming | 1.12 × | met |" in text
    assert "| ≥ 1.3 × the competent loop (at 1M and 4M) | 0.90 × | MISSED |" in text
    assert "| fixed overhead of a run (1 record) ≤ 4 s | 20.0 s | MISSED |" in text
    assert "| commit step ≤ 0.5 s at 4M | 1.00 s | at 4M |" in text
    assert "| fixed overhead of a run through Spark (1 record) | 30.0 s | reported |" in text
    assert "| a run through the warm Spark (1 record) ≤ 1.5 s | 1.20 s | met |" in text
    assert "| warm Spark ≥ 1.5 × the competent loop at 1,000,000 records | 1.50 × | met |" in text
    assert "## Where a run's time goes on a warm Spark" in text
    # The 1M run started Spark, so its fixed cost is the 1-record run through Spark: 40 s - 30 s.
    assert "Without it, eosflow moves 100,000 records/s" in text
    assert "| Iceberg sink ≥ 1.5 × the Postgres sink (eosflow) | 1.33 × | MISSED |" in text
    assert "## Where the Iceberg sink's time goes" in text
    # No sink is faster than its read and check: 40 s / 25 s is the most any sink could gain here.
    assert "| the most any sink can reach × the Postgres sink | 1.60 × | reported |" in text
    assert [r.measurement for r in read_csv(tmp_path / "latest.csv")] == list(MEASUREMENTS)

    scaling = [
        _fake(m, p, n, seconds[m] * n / 1_000_000, rss=700 + n / 1e6)
        for p in (1, 4)
        for n in (1_000_000, 4_000_000)
        for m in MEASUREMENTS
        if m not in OVERHEADS
    ]
    paths = report.write_scaling(tmp_path, scaling, info, done=4, planned=4)
    assert [p.name for p in paths] == ["scaling.md", "scaling.csv", "scaling.png"]
    text = (tmp_path / "scaling.md").read_text()
    assert "(× 4 work): time read ceiling × 4.00" in text and "eosflow peak RSS × 1.00" in text
    assert (
        write_csv(tmp_path / "again.csv", read_csv(tmp_path / "scaling.csv")).read_text()
        == (tmp_path / "scaling.csv").read_text()
    )


def test_readme_section_is_replaced_between_its_markers_only(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# intro\n\n{report.README_START}\nold table\n{report.README_END}\n\nafter\n")
    assert report.update_readme(readme, "| new | table |")
    assert readme.read_text() == (
        f"# intro\n\n{report.README_START}\n| new | table |\n{report.README_END}\n\nafter\n"
    )
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers\n")
    assert not report.update_readme(plain, "x") and plain.read_text() == "no markers\n"
