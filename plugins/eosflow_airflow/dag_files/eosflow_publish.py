"""One publish DAG per publisher in pipelines.yml (the file is read; nothing else is touched at import). A
refused publisher is left out here and reported by eosflow_config_errors.py."""

from eosflow_airflow.dags import build_publish_dag, declared_publishers

for _publisher in declared_publishers().values():
    globals()[f"eosflow_publish_{_publisher.name}"] = build_publish_dag(_publisher)
