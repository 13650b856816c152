"""Offset-range backfills of any pipeline, triggered with a form in the Airflow UI."""

from eosflow.pipelines import load_all
from eosflow.settings import load
from eosflow_airflow.dags import build_backfill_dag

backfill = build_backfill_dag(load_all(load()))
