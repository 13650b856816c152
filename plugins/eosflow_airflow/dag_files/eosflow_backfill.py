"""One backfill DAG per pipeline in pipelines.yml, triggered with a form in the Airflow UI: who may
trigger eosflow_backfill_<pipeline> may replay that pipeline and no other. A refused pipeline is left out
here and reported by eosflow_config_errors.py."""

from eosflow_airflow.dags import (
    build_backfill_dag,
    build_database_backfill_dag,
    declared_databases,
    declared_pipelines,
    parse_settings,
)

_settings = parse_settings()  # the pipelines file: the Variable eosflow_pipelines, else EOSFLOW_PIPELINES
for _pipeline in declared_pipelines(_settings).values():
    globals()[f"eosflow_backfill_{_pipeline.name}"] = build_backfill_dag(_pipeline)
# A database entry: one backfill DAG for its tables, the table a field of the form.
for _database in declared_databases(_settings).values():
    globals()[f"eosflow_backfill_{_database.name}"] = build_database_backfill_dag(_database)
