"""One marts DAG per warehouse pipeline with marts, scheduled on its output asset (no I/O at import)."""

from eosflow.pipelines import load_all
from eosflow.settings import load
from eosflow_airflow.dags import build_marts_dag
from eosflow_airflow.lineage import has_marts

for _pipeline in load_all(load()).values():
    if has_marts(_pipeline):
        globals()[f"eosflow_marts_{_pipeline.name}"] = build_marts_dag(_pipeline)
