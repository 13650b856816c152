"""Spark plumbing: the session, class-data sharing, spark-submit, and the job's entry (job_main.py, which
task.py runs under spark-submit and `eosflow ingest` calls)."""
