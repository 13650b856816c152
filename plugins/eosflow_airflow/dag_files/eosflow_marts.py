"""One marts DAG per warehouse pipeline with marts, scheduled on its output asset (no I/O at import). A
refused pipeline is left out here and reported by eosflow_config_errors.py."""

from eosflow_airflow.dags import build_marts_dag, declared_pipelines
from eosflow_airflow.lineage import has_marts

for _pipeline in declared_pipelines().values():
    if has_marts(_pipeline):
        globals()[f"eosflow_marts_{_pipeline.name}"] = build_marts_dag(_pipeline)
