"""The stream pipelines' health check (mode: stream), if any; only the pipelines file is read at import."""

from eosflow.ingest.pipelines import load_all
from eosflow.settings import load
from eosflow_airflow.dags import build_stream_health_dag

eosflow_stream_health = build_stream_health_dag(load_all(load()))
