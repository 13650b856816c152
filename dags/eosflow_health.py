"""Every pipeline's health check (stale commits) and every publisher's (rows held back by an open
transaction); only the pipelines file is read at import. A refused pipeline is left out here and reported
by eosflow_config_errors.py."""

from eosflow.publishers import load_publishers
from eosflow.settings import load
from eosflow_airflow.dags import build_health_dag, declared_pipelines

_settings = load()
eosflow_health = build_health_dag(declared_pipelines(_settings), load_publishers(_settings))
