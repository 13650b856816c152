"""Spark plumbing: the session, class-data sharing, spark-submit, the task entry point."""
