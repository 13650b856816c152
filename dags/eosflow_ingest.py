"""One ingest DAG per pipeline in pipelines.yml (the file is read; nothing else is touched at import). A
refused pipeline is left out here and reported by eosflow_config_errors.py."""

from eosflow_airflow.dags import build_ingest_dag, declared_pipelines

for _pipeline in declared_pipelines().values():
    globals()[f"eosflow_ingest_{_pipeline.name}"] = build_ingest_dag(_pipeline)
