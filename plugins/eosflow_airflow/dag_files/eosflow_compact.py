"""Hourly compaction of the partitioned targets (nothing is touched at import)."""

from eosflow_airflow.dags import build_compact_dag

eosflow_compact = build_compact_dag()
