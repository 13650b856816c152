"""One ingest DAG per pipeline in pipelines.yml (the file is read; nothing else is touched at import)."""

from eosflow.pipelines import load_all
from eosflow.settings import load
from eosflow_airflow.dags import build_ingest_dag

for _pipeline in load_all(load()).values():
    globals()[f"eosflow_ingest_{_pipeline.name}"] = build_ingest_dag(_pipeline)
