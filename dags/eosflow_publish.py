"""One publish DAG per publisher in pipelines.yml (the file is read; nothing else is touched at import)."""

from eosflow.publishers import load_publishers
from eosflow.settings import load
from eosflow_airflow.dags import build_publish_dag

for _publisher in load_publishers(load()).values():
    globals()[f"eosflow_publish_{_publisher.name}"] = build_publish_dag(_publisher)
