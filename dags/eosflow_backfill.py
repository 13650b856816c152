"""One backfill DAG per pipeline in pipelines.yml, triggered with a form in the Airflow UI: who may
trigger eosflow_backfill_<pipeline> may replay that pipeline and no other."""

from eosflow.pipelines import load_all
from eosflow.settings import load
from eosflow_airflow.dags import build_backfill_dag

for _pipeline in load_all(load()).values():
    globals()[f"eosflow_backfill_{_pipeline.name}"] = build_backfill_dag(_pipeline)
