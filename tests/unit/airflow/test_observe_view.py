"""The eosflow view's page and the metrics, from a snapshot built by hand (no Kafka, no Postgres)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html import escape

from eosflow.observe.metrics import exposition
from eosflow.observe.state import PartitionState, PipelineState
from eosflow.pipelines import load_all
from eosflow_airflow.view_page import page
from tests.orders import PIPELINES_YML


def state(
    checks_fail: bool = False, kafka_error: str | None = None, stale_after_s: float | None = 900.0
) -> PipelineState:
    now = datetime.now(UTC)  # at the call: the ages shown are measured from it
    pipeline = load_all(None, PIPELINES_YML)["orders"]
    checks = [
        {"name": "unique_kafka_coordinates", "invariant": "I1", "status": "pass", "failures": 0, "rows": [],
         "message": None, "checked_at": now},
        {"name": "ledger_ranges_contiguous", "invariant": "I2", "status": "fail" if checks_fail else "pass",
         "failures": 1 if checks_fail else 0,
         "rows": [{"kafka_partition": 3, "gap_start": 120, "gap_end": 140}] if checks_fail else [],
         "message": None, "checked_at": now},
    ]  # fmt: skip
    return PipelineState(
        pipeline,
        [
            PartitionState("orders", 0, 1200, 1500, now - timedelta(seconds=30)),
            PartitionState("orders", 1, None, 40, None),
        ],
        {("orders", 0): 95.0, ("orders", 1): 7200.0},
        [
            {
                "topic": "orders",
                "partition": 0,
                "start_offset": 1000,
                "end_offset": 1200,
                "kind": "data",
                "batch_id": "orders:run-7",
                "records_read": 180,
                "rows_written": 179,
                "rows_rejected": 1,
                "committed_at": now - timedelta(seconds=30),
            },
        ],  # fmt: skip
        checks,
        now,
        [
            {
                "batch_id": "orders:run-8",
                "run_id": "run-8",
                "kind": "ingest",
                "created_at": now,
                "in_flight": True,
            }
        ],
        [{"hour": now - timedelta(hours=h), "records": 100 * h, "lag": 10 * h} for h in range(24, 0, -1)],
        {"read": 180, "written": 179, "rejected": 1},
        kafka_error,
        None,  # not a stream
        stale_after_s,
    )


def test_the_page_shows_each_partition_s_position_end_lag_and_last_commit():
    html = page([state()])
    assert "<td class='l'>orders[0]</td><td>1,200</td><td>1,500</td><td>300</td><td>95 s</td>" in html
    assert (
        "<td class='l'>orders[1]</td><td>-</td><td>40</td><td>40</td><td>2.0 h</td><td class='l'>never</td>"
        in html
    )
    assert "invariants hold" in html and "lag</span><b>340 records" in html
    assert "orders:run-7" in html and "in flight" in html and "<svg" in html


def test_a_failing_invariant_shows_with_its_offending_rows_and_kafka_trouble_is_said():
    html = page([state(checks_fail=True, kafka_error="KafkaUnavailableError: no broker")])
    assert "CHECKS FAILING" in html and "<span class='bad'>fail</span>" in html
    offending = '{"kafka_partition": 3, "gap_start": 120, "gap_end": 140}'
    assert escape(offending) in html  # the offending row, HTML-escaped
    assert "Kafka did not answer: KafkaUnavailableError: no broker" in html


def test_the_ranges_filter_links_name_each_partition():
    html = page([state()], partition=0)
    assert "(partition 0)" in html and "href='?pipeline=orders&partition=1#orders'" in html


def test_the_metrics_carry_lag_positions_counts_commit_age_and_check_status():
    text = exposition(lambda: [state(checks_fail=True)]).decode()
    assert 'eosflow_lag_records{partition="0",pipeline="orders",topic="orders"} 300.0' in text
    assert 'eosflow_lag_records{partition="1",pipeline="orders",topic="orders"} 40.0' in text
    assert 'eosflow_position{partition="0",pipeline="orders",topic="orders"} 1200.0' in text
    assert 'eosflow_rows_rejected_total{pipeline="orders"} 1.0' in text
    assert (
        'eosflow_check_passing{check="ledger_ranges_contiguous",invariant="I2",pipeline="orders"} 0.0' in text
    )
    assert (
        'eosflow_check_passing{check="unique_kafka_coordinates",invariant="I1",pipeline="orders"} 1.0' in text
    )
    age = next(line for line in text.splitlines() if line.startswith("eosflow_last_commit_age_seconds{"))
    assert 29.0 <= float(age.split()[-1]) < 120.0
    assert 'eosflow_kafka_reachable{pipeline="orders"} 1.0' in text


def test_the_page_and_the_metrics_judge_staleness_by_the_health_dag_s_rule():
    # 340 records wait; the last commit was 30 s ago: within 900 s it keeps up, beyond 10 s it is stale.
    html = page([state()])
    assert "health</span><b><span class='ok'>keeping up</span>" in html
    assert 'eosflow_stale{pipeline="orders"} 0.0' in exposition(lambda: [state()]).decode()
    html = page([state(stale_after_s=10.0)])
    assert "<span class='bad'>STALE</span>" in html
    assert "pipeline orders: lag 340, last commit 30s ago: STALE: 340 records wait" in html
    assert 'eosflow_stale{pipeline="orders"} 1.0' in exposition(lambda: [state(stale_after_s=10.0)]).decode()
    # Kafka did not answer: the lag is unknown, so no verdict (and no metric) rather than a wrong one.
    assert "not judged" in page([state(kafka_error="KafkaUnavailableError: no broker")])


def test_the_page_shows_each_publishers_position_waiting_rows_and_what_holds_or_hides_them():
    from eosflow.observe.health import PublisherHealth
    from eosflow.observe.state import PublisherState
    from eosflow.publish.declaration import Publisher

    def publisher(name: str) -> Publisher:
        return Publisher(name, f"outbox.{name}", f"published.{name}", "id")

    held = "pid 4242 (database warehouse, user app, idle in transaction, open 900s)"
    html = page(
        [state()],
        publishers=[
            PublisherState(publisher("calm"), PublisherHealth("calm", 0, None, (), 300.0, "981/17")),
            PublisherState(publisher("held"), PublisherHealth("held", 12, 900.0, (held,), 300.0, None)),
            PublisherState(
                publisher("hidden"),
                PublisherHealth(
                    "hidden",
                    0,
                    None,
                    (),
                    300.0,
                    "5/1",
                    "eosflow_reader cannot read outbox.hidden: GRANT …",
                    False,
                ),
            ),
            PublisherState(publisher("down"), None, "KafkaException: broker down"),
        ],
    )
    section = html[html.index("<h2 id='publishers'>") :]
    rows = section.split("<tr>")[2:]
    assert [r.split("</td>")[0].removeprefix("<td class='l'>") for r in rows] == [
        "calm",
        "held",
        "hidden",
        "down",
    ]
    assert "981/17" in rows[0] and "healthy" in rows[0]
    assert "nothing published yet" in rows[1] and ">12<" in rows[1] and "STALE" in rows[1]
    assert escape(held) in rows[1]
    assert "not judged" in rows[2] and "GRANT" in rows[2] and "STALE" not in rows[2]
    assert "broker down" in rows[3]


def test_the_page_has_no_publisher_section_when_none_is_declared():
    assert "id='publishers'" not in page([state()])
