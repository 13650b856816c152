"""One ingest DAG per pipeline and per database entry in pipelines.yml (the file is read; nothing else is
touched at import). A refused one is left out here and reported by eosflow_config_errors.py."""

from eosflow_airflow.dags import (
    build_database_dag,
    build_ingest_dag,
    declared_databases,
    declared_pipelines,
    parse_settings,
)

_settings = parse_settings()  # the pipelines file: the Variable eosflow_pipelines, else EOSFLOW_PIPELINES
for _pipeline in declared_pipelines(_settings).values():
    globals()[f"eosflow_ingest_{_pipeline.name}"] = build_ingest_dag(_pipeline)
# A database entry: one DAG for all its tables (its members are found when it runs).
for _database in declared_databases(_settings).values():
    globals()[f"eosflow_ingest_{_database.name}"] = build_database_dag(_database)
