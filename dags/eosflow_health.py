"""Every pipeline's health check (stale commits) and every publisher's (rows held back by an open
transaction); only the pipelines file is read at import."""

from eosflow.pipelines import load_all
from eosflow.publishers import load_publishers
from eosflow.settings import load
from eosflow_airflow.dags import build_health_dag

_settings = load()
eosflow_health = build_health_dag(load_all(_settings), load_publishers(_settings))
