"""Every pipeline's health check (stale commits) and every publisher's (rows held back by an open
transaction); only the pipelines file is read at import. A refused pipeline or publisher is left out here
and reported by eosflow_config_errors.py."""

from eosflow_airflow.dags import build_health_dag, declared_pipelines, declared_publishers, parse_settings

_settings = parse_settings()
eosflow_health = build_health_dag(declared_pipelines(_settings), declared_publishers(_settings))
