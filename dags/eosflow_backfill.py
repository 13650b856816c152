"""One backfill DAG per pipeline in pipelines.yml, triggered with a form in the Airflow UI: who may
trigger eosflow_backfill_<pipeline> may replay that pipeline and no other. A refused pipeline is left out
here and reported by eosflow_config_errors.py."""

from eosflow_airflow.dags import build_backfill_dag, declared_pipelines

for _pipeline in declared_pipelines().values():
    globals()[f"eosflow_backfill_{_pipeline.name}"] = build_backfill_dag(_pipeline)
