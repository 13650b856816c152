"""How a failed spark-submit ends the Spark task: the job's own line, and no retry where none can help."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException

PROGRESS = "eosflow ingest: reusing the plan persisted for p:run-1 (planned): a retry reads the same ranges"


def test_refused_fenced_and_data_loss_fail_at_once_with_the_jobs_line():
    from eosflow_airflow.operators.spark import submit_failure

    refused = submit_failure(2, [PROGRESS, "eosflow ingest: REFUSED: chunk t[0] [0, 10) is ..."], "p")
    fenced = submit_failure(3, [PROGRESS, "eosflow ingest: FENCED: batch p:run-1 is fenced: ..."], "p")
    lost = submit_failure(4, ["eosflow ingest: DATA LOSS: batch p:run-1: Kafka deleted records ..."], "p")
    for failure in (refused, fenced, lost):
        assert type(failure) is AirflowFailException
    assert str(refused).startswith("REFUSED: chunk t[0] [0, 10) is ...")
    assert str(fenced).startswith("FENCED: batch p:run-1 is fenced: ...")
    assert str(lost).startswith("DATA LOSS: batch p:run-1: Kafka deleted records ...")
    assert "trigger eosflow_ingest_p with acknowledge_data_loss=true" in str(lost)


def test_other_failures_keep_their_retries_and_the_providers_error_when_the_job_said_nothing():
    from eosflow_airflow.operators.spark import submit_failure

    line = "eosflow ingest: FAILED: batch p:run-1: staged 9 rows, read 10"
    uneven = submit_failure(5, [PROGRESS, line], "p")
    assert type(uneven) is AirflowException  # retried: a transient cause is possible
    assert str(uneven).startswith("FAILED: batch p:run-1: staged 9 rows, read 10")
    assert submit_failure(1, [PROGRESS], "p") is None  # a crash after progress: not the job's verdict
    assert submit_failure(2, [], "p") is None  # spark-submit's own exit 2, before the job ran
    assert submit_failure(0, [PROGRESS], "p") is None
