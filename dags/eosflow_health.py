"""Every pipeline's health check (stale commits); only the pipelines file is read at import."""

from eosflow.pipelines import load_all
from eosflow.settings import load
from eosflow_airflow.dags import build_health_dag

eosflow_health = build_health_dag(load_all(load()))
