"""Hooks: eosflow's settings from Airflow's connections and the Variable eosflow_pipelines (eosflow.py), the
schema registry's and the Iceberg catalog's connection types (connection_types.py), and spark-submit
(spark_submit.py)."""
